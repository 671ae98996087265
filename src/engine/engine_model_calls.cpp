// The ways Engine calls the model, in one place: in order (run_and_sample: the logits sampled on the host, or the
// tokens drawn where they are through DeviceSteps), overlapped (step_overlapped: step N + 1 started before N is
// postprocessed, its inputs owed by N), and chained (run_chained: a verify step with the draft module's next draft
// queued behind it). engine.cpp holds the step's order and bookkeeping, engine_speculation.cpp the drafts.
#include <chrono>
#include <unordered_map>
#include <utility>

#include "kernels/cpu/sampling.h"
#include "src/engine/engine.h"
#include "src/engine/model_drafter.h"

namespace deepinfer {

std::vector<std::vector<int32_t>> Engine::run(const ForwardBatch& forward, const ScheduledBatch& batch,
                                              StepDrafts& drafts, bool chained) {
  if (chained) return run_chained(forward, batch, drafts);
  return run_and_sample(forward, batch, drafts, token_masks(batch, drafts));
}

// Schedule and start step N + 1, then postprocess step N: the tokens N samples reach N + 1's inputs by placeholder, so
// the host's work between the two forwards is only what N + 1 needs. A backend that samples on the device and starts
// steps asynchronously (device_tokens_) gets N + 1 queued behind N with the owed inputs named by N's rows, and the host
// postprocesses N while the device runs N + 1; otherwise the host resolves them itself. A one-rank engine with
// nothing to schedule starts nothing; an expert-parallel group's ranks start a step, empty or not, every time.
void Engine::step_overlapped() {
  const auto start = std::chrono::steady_clock::now();
  const ScheduledBatch batch = scheduler_.schedule();
  DI_CHECK(!batch.items.empty() || in_flight_ || !scheduler_.has_unfinished() || options_.experts != nullptr,
           "the scheduler found nothing to run with unfinished sequences (KV cache too small?)");
  std::optional<InFlight> started;
  if (!batch.items.empty() || options_.experts != nullptr) {
    ForwardBatch forward = build_forward_batch(batch, {});
    link_pending_inputs(batch, forward);
    count_replay_rows(forward);
    InFlight step{batch, {}, {}};
    if (device_tokens_) {
      device_->start_forward_and_sample(forward, *cache_, options_.experts, sampling_rows(batch, {}),
                                      options_.logits_hashes);
    } else {
      step.emitted = run_and_sample(forward, batch, {}, {});
      step.hashes = std::exchange(step_hashes_, {});
      note_device_idle();
    }
    scheduler_.launched(batch);
    if (batch.is_prefill)
      for (const ScheduledSequence& item : batch.items) stats_.num_prefill_tokens += item.num_new;
    started = std::move(step);
  }
  if (in_flight_) complete(*in_flight_);
  in_flight_.reset();
  if (started && started->batch.items.empty()) {
    if (device_tokens_) {  // (in order: after the step before it)
      device_->finish_forward_and_sample(nullptr);
      note_device_idle();
    }
  } else {
    in_flight_ = std::move(started);  // (an empty step owes nothing, so it is never kept in flight)
  }
  ++stats_.num_steps;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (batch.is_prefill ? stats_.prefill_s : stats_.decode_s) += seconds;
}

void Engine::link_pending_inputs(const ScheduledBatch& batch, ForwardBatch& forward) const {
  // Only the step in flight can owe a token: the one before it was completed before this one was scheduled. Its
  // logits rows are one per item (no drafts under overlap), so item j's token is row j on the device, and its
  // emitted tokens in sampling-item order on the host.
  std::unordered_map<const Sequence*, int32_t> owed;  // row on the device, or the token on the host
  for (size_t j = 0, s = 0; in_flight_ && j < in_flight_->batch.items.size(); ++j) {
    if (!in_flight_->batch.items[j].samples) continue;
    owed[in_flight_->batch.items[j].seq] =
        device_tokens_ ? static_cast<int32_t>(j) : in_flight_->emitted[s].front();
    ++s;
  }
  int64_t row = 0;
  for (const ScheduledSequence& item : batch.items) {
    for (int64_t i = 0; i < item.num_new; ++i, ++row) {
      if (forward.token_ids[row] != kPendingToken) continue;
      const auto it = owed.find(item.seq);
      DI_CHECK(it != owed.end(), "sequence {}'s input {} is a token no step in flight samples", item.seq->idx,
               item.seq->num_cached + i);
      if (device_tokens_) {
        forward.tokens_from_previous_step.insert(forward.tokens_from_previous_step.end(),
                                                 {static_cast<int32_t>(row), it->second});
        forward.token_ids[row] = 0;  // (a valid id until the device writes the token)
      } else {
        forward.token_ids[row] = it->second;
      }
    }
  }
}

std::vector<SamplingRow> Engine::sampling_rows(const ScheduledBatch& batch, const StepDrafts& drafts) const {
  // One row per logits row: the sampled token lands at the row's position + 1, which indexes the request's stream.
  std::vector<SamplingRow> rows;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const Sequence& seq = *batch.items[i].seq;
    const SamplingParams& p = seq.request->sampling;
    const int64_t num_rows = drafts.empty() ? 1 : 1 + drafts.num_verified[i];
    for (int64_t j = 0; j < num_rows; ++j) rows.push_back({p.temperature, p.top_p, p.top_k, p.seed, seq.num_tokens() + j});
  }
  return rows;
}

std::vector<std::vector<int32_t>> Engine::run_and_sample(const ForwardBatch& forward, const ScheduledBatch& batch,
                                                         const StepDrafts& drafts, const TokenMasks& masks) {
  std::vector<SamplingRow> rows = sampling_rows(batch, drafts);
  std::vector<int32_t> drawn(rows.size());
  std::vector<uint64_t> hashes(options_.logits_hashes ? rows.size() : 0);
  const int64_t vocab = model_.config().vocab_size;
  const auto sample_host = [&](Tensor logits) {
    if (rows.empty()) return;
    if (!hashes.empty()) cpu::logits_row_hashes(logits.data<float>(), logits.size(0), vocab, hashes.data());
    if (!masks.empty())
      cpu::apply_token_bitmask(logits.data<float>(), logits.size(0), vocab, masks.bits.data(), masks.words,
                               masks.masked.data());
    cpu::sample_rows(logits.data<float>(), logits.size(0), vocab, rows.data(), drawn.data());
  };
  if (device_ != nullptr) {  // only the sampled tokens come back from the device (the logits stay there)
    drawn = device_->forward_and_sample(forward, *cache_, options_.experts, rows, masks.empty() ? nullptr : &masks,
                                      hashes.empty() ? nullptr : hashes.data());
  } else {
    sample_host(model_.forward(forward, *cache_, options_.experts));
  }
  return emitted_tokens(batch, drafts, drawn, hashes);
}

std::vector<std::vector<int32_t>> Engine::run_chained(const ForwardBatch& forward, const ScheduledBatch& batch,
                                                      StepDrafts& drafts) {
  const std::vector<SamplingRow> rows = sampling_rows(batch, drafts);
  device_->start_forward_and_sample(forward, *cache_, options_.experts, rows, options_.logits_hashes);
  // The draft this step verifies ran before it on the device: its blocks now, while the device verifies, and the
  // proposals that named its tokens by placeholder take them (with their confidences, for the statistics).
  if (settle_draft()) {
    for (size_t i = 0; i < batch.items.size(); ++i) {
      DraftProposal& proposal = drafts.proposals[i];
      if (proposal.tokens.empty()) continue;
      const int64_t n = proposal.size();
      proposal = options_.speculation.drafter->propose(*batch.items[i].seq, n);
      DI_CHECK(proposal.size() == n, "sequence {}'s settled draft has {} of its {} drafts", batch.items[i].seq->idx,
               proposal.size(), n);
    }
  }
  std::vector<SamplingRow> draft_rows;
  for (const ScheduledSequence& item : batch.items) draft_rows.push_back(ModelDrafter::sampling_row(*item.seq));
  model_.draft_module()->start_chained_draft(forward, *cache_, draft_rows);
  draft_in_flight_ = true;
  std::vector<uint64_t> hashes(options_.logits_hashes ? rows.size() : 0);
  const std::vector<int32_t> drawn = device_->finish_forward_and_sample(hashes.empty() ? nullptr : hashes.data());
  DI_CHECK(drawn.size() == rows.size(), "a verify step of {} rows gave {} tokens", rows.size(), drawn.size());
  return emitted_tokens(batch, drafts, drawn, hashes);
}

void Engine::note_device_idle() {
  if (device_ == nullptr) return;
  const DeviceIdle now = device_->device_idle();
  if (now.gaps == idle_noted_.gaps) return;  // (not measured: the CPU, or the first step)
  ++stats_.device_idle_steps;
  stats_.device_idle_ms += now.ms - idle_noted_.ms;
  idle_noted_ = now;
}

}  // namespace deepinfer
