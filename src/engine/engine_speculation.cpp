// Engine's speculative decoding: the step's drafts (from the drafter, or the draft in flight settled first), how many
// each sequence verifies (all that fit, or the variable-length rule over the measured cost curve), the tokens a verify
// step emits (the accepted drafts and the token after them), and the draft rows linked to a draft still on the device.
// The drafters themselves: drafter.h (the interface), controlled_drafter.h, model_drafter.h.
#include <algorithm>
#include <span>

#include "src/core/log.h"
#include "src/engine/engine.h"
#include "src/engine/model_drafter.h"

namespace deepinfer {

Engine::StepDrafts Engine::drafts_for(const ScheduledBatch& batch, bool chained) {
  // Any step but a chained decode step first waits for the draft in flight (the drafter drafts in order after it),
  // and so does a step under the variable-length rule, which lays the step out by the draft's confidences.
  if (!chained || options_.speculation.variable_length) settle_draft();
  return propose_drafts(batch);
}

Engine::StepDrafts Engine::propose_drafts(const ScheduledBatch& batch) {
  const SpeculationOptions& spec = options_.speculation;
  StepDrafts drafts;
  if (!spec.enabled() || batch.is_prefill || batch.items.empty()) return drafts;
  for (const ScheduledSequence& item : batch.items) {
    const Sequence& seq = *item.seq;
    // The drafts and the token after them must fit the request's new tokens and the model's length.
    const int64_t room = std::min(seq.request->max_new_tokens - seq.num_generated(),
                                  options_.limits.max_model_len - seq.num_tokens()) - 1;
    const int64_t k = std::clamp<int64_t>(room, 0, spec.num_drafts);
    DraftProposal proposal = k > 0 ? spec.drafter->propose(seq, k) : DraftProposal{};
    DI_CHECK(proposal.size() <= k && static_cast<int64_t>(proposal.confidence.size()) == proposal.size() &&
                 (proposal.drawn_correct.empty() || static_cast<int64_t>(proposal.drawn_correct.size()) == proposal.size()),
             "the drafter proposed {} drafts ({} confidences) for at most {}", proposal.size(),
             proposal.confidence.size(), k);
    std::vector<uint32_t> masks;
    if (options_.structured != nullptr) {  // drafts stop before a waiting constraint's start token
      const int64_t before = options_.structured->drafts_before_start(seq, proposal.tokens);
      proposal.tokens.resize(before);
      proposal.confidence.resize(before);
      if (!proposal.drawn_correct.empty()) proposal.drawn_correct.resize(before);
    }
    if (options_.structured != nullptr && options_.structured->constrains(seq)) {
      // Drafts outside the grammar are not verified: the proposal ends before the first one.
      masks.resize((proposal.size() + 1) * options_.structured->mask_words());
      const int64_t admitted = options_.structured->fill_masks(seq, proposal.tokens, masks.data());
      proposal.tokens.resize(admitted);
      proposal.confidence.resize(admitted);
      if (!proposal.drawn_correct.empty()) proposal.drawn_correct.resize(admitted);
      masks.resize((admitted + 1) * options_.structured->mask_words());
    }
    drafts.proposals.push_back(std::move(proposal));
    drafts.masks.push_back(std::move(masks));
  }
  drafts.num_verified = verify_lengths(drafts.proposals);
  // The verified rows need their blocks; where the cache has none to spare, fewer drafts are verified.
  for (size_t i = 0; i < batch.items.size(); ++i) {
    Sequence& seq = *batch.items[i].seq;
    int64_t& k = drafts.num_verified[i];
    while (k > 0 && !blocks_.can_grow(seq, seq.num_tokens() + k)) --k;
    blocks_.grow(seq, seq.num_tokens() + k);
  }
  return drafts;
}

std::vector<int64_t> Engine::verify_lengths(const std::vector<DraftProposal>& proposals) {
  const SpeculationOptions& spec = options_.speculation;
  std::vector<int64_t> lengths;
  for (const DraftProposal& p : proposals) lengths.push_back(p.size());
  if (!spec.variable_length) return lengths;
  if (verify_warmup_done_ < spec.cost_warmup_steps || verify_cost_.model() == nullptr) {
    // Measuring the cost curve: every sequence verifies the same number of drafts, cycling 0..num_drafts.
    const int64_t fixed = verify_warmup_done_ % (spec.num_drafts + 1);
    for (int64_t& k : lengths) k = std::min(k, fixed);
    return lengths;
  }
  std::vector<std::vector<double>> survival;
  for (const DraftProposal& p : proposals) {
    double a = 1.0;
    survival.emplace_back();
    for (double c : p.confidence) survival.back().push_back(a *= std::clamp(c, 0.0, 1.0));
  }
  return choose_verify_lengths(survival, *verify_cost_.model(), spec.verify_row_quantum).drafts;
}

void Engine::record_verify_time(int64_t rows, double ms) {
  const SpeculationOptions& spec = options_.speculation;
  if (!spec.variable_length) return;
  if (verify_warmup_done_ < spec.cost_warmup_steps) {
    verify_cost_.record_warmup(rows, ms);
    if (++verify_warmup_done_ == spec.cost_warmup_steps) {
      verify_cost_.freeze();
      spdlog::info("speculative decoding: verify step cost by rows, {}", verify_cost_.summary());
    }
    return;
  }
  verify_cost_.observe(rows, ms);
}

std::vector<std::vector<int32_t>> Engine::emitted_tokens(const ScheduledBatch& batch, const StepDrafts& drafts,
                                                         const std::vector<int32_t>& drawn,
                                                         const std::vector<uint64_t>& hashes) {
  std::vector<std::vector<int32_t>> emitted;
  step_hashes_.assign(batch.items.size(), {});
  int64_t row = 0;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    if (drafts.empty()) {
      if (batch.items[i].samples) emitted.push_back({drawn[row]});
      if (batch.items[i].samples && !hashes.empty()) step_hashes_[i] = {hashes[row]};
      ++row;
      continue;
    }
    // The accepted drafts, then the target's token at the first row whose draft it rejected (or after the last).
    const DraftProposal& proposal = drafts.proposals[i];
    const int64_t k = drafts.num_verified[i];  // the k + 1 rows bound the drafts judged to the k verified
    const int64_t a = accepted_drafts(proposal, std::span<const int32_t>(drawn).subspan(row, k + 1));
    emitted.emplace_back(proposal.tokens.begin(), proposal.tokens.begin() + a);
    emitted.back().push_back(drawn[row + a]);
    if (!hashes.empty()) step_hashes_[i].assign(hashes.begin() + row, hashes.begin() + row + a + 1);
    stats_.speculation.record(proposal, k, a);
    row += k + 1;
  }
  if (!drafts.empty()) ++stats_.speculation.verify_steps;
  return emitted;
}

void Engine::link_draft_inputs(const ScheduledBatch& batch, const StepDrafts& drafts, ForwardBatch& forward) const {
  int64_t row = 0;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const Sequence& seq = *batch.items[i].seq;
    row += batch.items[i].num_new;  // the item's drafts follow its new tokens
    for (int64_t k = 0; k < drafts.num_verified[i]; ++k, ++row) {
      const int32_t source = model_drafter_->draft_row(seq, k);
      if (source < 0) continue;  // a block already here
      forward.tokens_from_draft.insert(forward.tokens_from_draft.end(), {static_cast<int32_t>(row), source});
    }
  }
}

bool Engine::settle_draft() {
  if (!draft_in_flight_) return false;
  draft_in_flight_ = false;
  model_drafter_->settle(model_.draft_module()->finish_chained_draft());
  return true;
}

}  // namespace deepinfer
