// Scheduler: continuous batching over one rank's sequences. Each step is either a prefill step (chunks of
// waiting sequences' uncached tokens, up to a token budget) or a decode step (one token for every running
// sequence). Prefill goes first, as in nano-vllm; a decode step that runs out of KV blocks preempts the
// newest running sequence, which later recomputes its tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "src/engine/block_manager.h"
#include "src/engine/sequence.h"
#include "src/engine/stop_sequences.h"

namespace deepinfer {

struct SchedulerLimits {
  int64_t max_running = 256;
  int64_t chunk_tokens = 4096;  // the prefill chunk: uncached tokens per step
  int64_t max_model_len = 0;       // a sequence stops ("length") when it reaches this many tokens
  bool handoff_after_prefill = false;  // prefill role: a prefilled sequence leaves for a decode rank
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int64_t num_new = 0;   // tokens from seq->num_cached on
  bool samples = false;  // this step reaches the sequence's last token, so it samples the next one
};

struct ScheduledBatch {
  bool is_prefill = false;
  std::vector<ScheduledSequence> items;
};

class Scheduler {
 public:
  Scheduler(SchedulerLimits limits, BlockManager& blocks, std::vector<int32_t> eos_token_ids);

  void add(Sequence* seq);
  // A sequence whose KV arrived prefilled (decode role): it joins the running set; its blocks are allocated.
  void add_running(Sequence* seq);
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }

  ScheduledBatch schedule();
  // Records a step's outcome: advances caches, appends each sampling item's emitted tokens (in order; one, or with
  // speculative decoding the accepted drafts and the token after them, whose rows the cache then also holds),
  // finishes sequences (at the first stop token or the length limit, dropping what follows) and frees their
  // blocks, and returns the blocks a decode sequence no longer needs (its rejected drafts' tail).
  void postprocess(const ScheduledBatch& batch, std::span<const std::vector<int32_t>> emitted);
  // One token per sampling item.
  void postprocess(const ScheduledBatch& batch, const std::vector<int32_t>& sampled);

  // Overlapped scheduling (the engine launches step N + 1 before step N's tokens are known): postprocess in two
  // halves, without speculation and without handoffs. launched(), as the step starts: its rows count as cached and
  // each sampling item gets a placeholder (kPendingToken) for the token the step will sample, so that the next
  // schedule() already runs it; a sequence whose placeholder reaches its length leaves the running set.
  // completed(), once the tokens are known: the placeholders take them in order, stop tokens and lengths finish
  // sequences (a sequence that stopped may have run one more step: that step's row for it is dropped). Returns, per
  // sampling item, whether its token was kept.
  void launched(const ScheduledBatch& batch);
  std::vector<bool> completed(const ScheduledBatch& batch, const std::vector<int32_t>& sampled);

  // The prefix cache's slower tier (null: none), consulted where a fresh sequence's prefix misses the blocks.
  void set_prefix_tier(BlockManager::Tier* tier) { prefix_tier_ = tier; }
  // Requests' stop sequences (null: none watched): a token that completes one stops its sequence as a stop token does.
  void set_stop_sequences(StopSequences* stops) { stops_ = stops; }
  // The blocks registered since the last call (the prefix cache's), with the sequence that filled each.
  std::vector<std::pair<const Sequence*, BlockManager::RegisteredBlock>> take_registered() {
    return std::exchange(newly_registered_, {});
  }

  // Drops the waiting sequences no step has started (no token cached, no block, nothing generated): a job told to
  // stop admits no more work (generate's drain). Returns them; a part-prefilled or preempted one stays.
  std::vector<Sequence*> take_unstarted();
  // Ends a running sequence early (it failed alone: its constraint dead-ended): out of the running set, its blocks
  // freed, among the finished.
  void end_early(Sequence* seq) { finish(seq); }
  // Sequences that finished, and (prefill role) that were handed off, since the last call.
  std::vector<Sequence*> take_finished() { return std::exchange(newly_finished_, {}); }
  std::vector<Sequence*> take_handoffs() { return std::exchange(newly_handed_off_, {}); }

 private:
  void preempt(Sequence* seq);
  bool is_stop_token(const Sequence& seq, int32_t token) const;
  // Whether the output tokens [0, count) of seq complete one of its stop sequences (stops_).
  bool completes_stop(const Sequence& seq, int64_t count) const {
    return stops_ != nullptr && stops_->stops_at(seq, count);
  }
  void register_blocks(Sequence* seq);
  void finish(Sequence* seq);  // out of the running set (or the waiting queue), its blocks freed

  SchedulerLimits limits_;
  BlockManager& blocks_;
  BlockManager::Tier* prefix_tier_ = nullptr;
  StopSequences* stops_ = nullptr;
  std::vector<std::pair<const Sequence*, BlockManager::RegisteredBlock>> newly_registered_;
  std::vector<int32_t> eos_token_ids_;
  std::deque<Sequence*> waiting_;  // FIFO; the front may be part-way through a chunked prefill
  std::vector<Sequence*> running_;
  std::vector<Sequence*> newly_finished_;
  std::vector<Sequence*> newly_handed_off_;
  int64_t num_preemptions_ = 0;
};

}  // namespace deepinfer
