#include "src/engine/scheduler.h"

#include <algorithm>

#include "src/core/check.h"

namespace deepinfer {

Scheduler::Scheduler(SchedulerLimits limits, BlockManager& blocks, std::vector<int32_t> eos_token_ids)
    : limits_(limits), blocks_(blocks), eos_token_ids_(std::move(eos_token_ids)) {}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  DI_CHECK(seq->num_uncached() == 1, "a prefilled sequence must have exactly its sampled token uncached, has {}",
           seq->num_uncached());
  seq->status = SequenceStatus::kRunning;
  running_.push_back(seq);
}

std::vector<Sequence*> Scheduler::take_unstarted() {
  std::vector<Sequence*> dropped;
  std::erase_if(waiting_, [&](Sequence* seq) {
    const bool unstarted = seq->num_cached == 0 && seq->block_table.empty() && seq->num_generated() == 0;
    if (unstarted) dropped.push_back(seq);
    return unstarted;
  });
  return dropped;
}

ScheduledBatch Scheduler::schedule() {
  ScheduledBatch batch;
  int64_t budget = limits_.chunk_tokens;
  for (Sequence* seq : waiting_) {
    if (budget == 0) break;
    if (static_cast<int64_t>(running_.size() + batch.items.size()) >= limits_.max_running) break;
    blocks_.match_prefix(*seq, prefix_tier_);  // a fresh sequence starts after its cached prefix (prefix cache on)
    const int64_t take = std::min(seq->num_uncached(), budget);
    if (!blocks_.can_grow(*seq, seq->num_cached + take)) break;
    blocks_.grow(*seq, seq->num_cached + take);
    batch.items.push_back({seq, take, take == seq->num_uncached()});
    budget -= take;
  }
  if (!batch.items.empty()) {
    batch.is_prefill = true;
    return batch;
  }

  // Decode: every running sequence adds one token; make room by preempting the newest when blocks run out.
  for (size_t i = 0; i < running_.size();) {
    Sequence* seq = running_[i];
    if (blocks_.can_grow(*seq, seq->num_tokens())) {
      blocks_.grow(*seq, seq->num_tokens());
      ++i;
      continue;
    }
    Sequence* victim = running_.back();
    preempt(victim);
    if (victim == seq) break;
  }
  for (Sequence* seq : running_) {
    DI_CHECK(seq->num_uncached() == 1, "running sequence {} has {} uncached tokens", seq->idx, seq->num_uncached());
    batch.items.push_back({seq, 1, true});
  }
  return batch;
}

void Scheduler::preempt(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_.release(*seq);
  seq->num_cached = 0;  // recomputed from its tokens when it is scheduled again (exactly: no replayed window)
  seq->swa_floor = seq->keep_inputs_below = 0;
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_front(seq);
  ++num_preemptions_;
}

bool Scheduler::is_stop_token(const Sequence& seq, int32_t token) const {
  const auto& stop = seq.request->sampling.stop_token_ids;
  const bool eos = !seq.request->sampling.ignore_eos &&
                   std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end();
  return eos || std::find(stop.begin(), stop.end(), token) != stop.end();
}

void Scheduler::postprocess(const ScheduledBatch& batch, const std::vector<int32_t>& sampled) {
  std::vector<std::vector<int32_t>> emitted;
  for (int32_t token : sampled) emitted.push_back({token});
  postprocess(batch, emitted);
}

void Scheduler::postprocess(const ScheduledBatch& batch, std::span<const std::vector<int32_t>> emitted) {
  size_t sample_idx = 0;
  for (const ScheduledSequence& item : batch.items) {
    Sequence* seq = item.seq;
    const std::vector<int32_t>* tokens = nullptr;
    if (item.samples) {
      DI_CHECK(sample_idx < emitted.size(), "fewer emitted token lists ({}) than sampling sequences", emitted.size());
      tokens = &emitted[sample_idx++];
      DI_CHECK(!tokens->empty(), "sequence {} sampled no token", seq->idx);
    }
    // The rows of the accepted drafts are cached too: all emitted tokens but the last follow the cached ones.
    const int64_t accepted = tokens != nullptr ? static_cast<int64_t>(tokens->size()) - 1 : 0;
    DI_CHECK(accepted == 0 || !batch.is_prefill, "a prefill step emitted {} tokens for sequence {}", accepted + 1,
             seq->idx);
    seq->num_cached += item.num_new + accepted;
    if (tokens == nullptr) {
      register_blocks(seq);
      continue;
    }
    for (int32_t token : *tokens) {
      seq->tokens.push_back(token);
      if (is_stop_token(*seq, token) || completes_stop(*seq, seq->num_generated()))
        seq->finish_reason = FinishReason::kStop;
      else if (seq->num_generated() >= seq->request->max_new_tokens || seq->num_tokens() >= limits_.max_model_len)
        seq->finish_reason = FinishReason::kLength;
      if (seq->finish_reason != FinishReason::kNone) break;
    }
    // A sequence that stopped part-way through its accepted drafts holds no more cached rows than tokens.
    seq->num_cached = std::min(seq->num_cached, seq->num_tokens() - 1);
    register_blocks(seq);

    if (batch.is_prefill) {  // its prefill is complete: from the waiting queue to the running set
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
      running_.push_back(seq);
      seq->status = SequenceStatus::kRunning;
    }
    if (seq->finish_reason != FinishReason::kNone) {
      finish(seq);
    } else if (batch.is_prefill && limits_.handoff_after_prefill) {
      // Blocks stay allocated until the engine has copied the KV out for the decode rank.
      running_.erase(std::find(running_.begin(), running_.end(), seq));
      seq->status = SequenceStatus::kHandedOff;
      if (stops_ != nullptr) stops_->forget(*seq);  // (the decode rank reads its output from the start)
      newly_handed_off_.push_back(seq);
    } else if (!batch.is_prefill) {
      blocks_.shrink(*seq, seq->num_tokens());  // the blocks only rejected drafts' rows reached
    }
  }
}

void Scheduler::register_blocks(Sequence* seq) {
  for (const BlockManager::RegisteredBlock& block : blocks_.register_full_blocks(*seq))
    newly_registered_.emplace_back(seq, block);
}

void Scheduler::finish(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) waiting_.erase(it);
  blocks_.release(*seq);
  if (stops_ != nullptr) stops_->forget(*seq);
  seq->status = SequenceStatus::kFinished;
  seq->awaiting_last = false;
  newly_finished_.push_back(seq);
}

void Scheduler::launched(const ScheduledBatch& batch) {
  DI_CHECK(!limits_.handoff_after_prefill, "overlapped scheduling does not hand sequences off");
  for (const ScheduledSequence& item : batch.items) {
    Sequence* seq = item.seq;
    seq->num_cached += item.num_new;
    if (!item.samples) continue;
    seq->tokens.push_back(kPendingToken);
    ++seq->num_pending;
    if (batch.is_prefill) {  // its prefill is complete: from the waiting queue to the running set
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
      running_.push_back(seq);
      seq->status = SequenceStatus::kRunning;
    }
    // The token in flight is its last one (unless a stop comes first): it waits for it outside the running set.
    if (seq->num_generated() >= seq->request->max_new_tokens || seq->num_tokens() >= limits_.max_model_len) {
      running_.erase(std::find(running_.begin(), running_.end(), seq));
      seq->awaiting_last = true;
    }
  }
}

std::vector<bool> Scheduler::completed(const ScheduledBatch& batch, const std::vector<int32_t>& sampled) {
  std::vector<bool> kept;
  size_t sample_idx = 0;
  for (const ScheduledSequence& item : batch.items) {
    Sequence* seq = item.seq;
    if (item.samples) {
      DI_CHECK(sample_idx < sampled.size(), "fewer sampled tokens ({}) than sampling sequences", sampled.size());
      kept.push_back(seq->status != SequenceStatus::kFinished);
    }
    const int32_t token = item.samples ? sampled[sample_idx++] : kPendingToken;
    if (seq->status == SequenceStatus::kFinished) continue;  // it stopped at an earlier step: this row is dropped
    if (item.samples) {
      DI_CHECK(seq->num_pending > 0, "sequence {} sampled with no token pending", seq->idx);
      const int64_t at = seq->num_tokens() - seq->num_pending;  // the oldest placeholder
      seq->tokens[at] = token;
      --seq->num_pending;
      const int64_t through = at + 1;  // tokens up to and including this one
      if (is_stop_token(*seq, token) || completes_stop(*seq, through - seq->num_prompt_tokens))
        seq->finish_reason = FinishReason::kStop;
      else if (through - seq->num_prompt_tokens >= seq->request->max_new_tokens || through >= limits_.max_model_len)
        seq->finish_reason = FinishReason::kLength;
      if (seq->finish_reason != FinishReason::kNone) {  // what came after it (a step in flight) is dropped
        seq->tokens.resize(through);
        seq->num_pending = 0;
        seq->num_cached = std::min(seq->num_cached, seq->num_tokens() - 1);
      }
    }
    if (seq->num_pending == 0 || seq->num_cached <= seq->num_tokens() - seq->num_pending) register_blocks(seq);
    if (seq->finish_reason != FinishReason::kNone) finish(seq);
  }
  return kept;
}

}  // namespace deepinfer
