// The model's own draft module as speculative decoding's drafter: DeepSeek-V3's MTP layer (mtp_drafter.h) or
// DeepSeek-V4.1's DSpark layers (dspark_drafter.h). Between steps it holds a block of drafts per sequence, anchored at
// the sequence's last token, which propose() hands out while the sequence is where the block was drafted.
//  - In order: once the scheduler has recorded a step, the engine calls after_step and the drafter drafts there, from
//    what the step left on the host.
//  - Chained (the engine's overlapped scheduling, DraftModule::start_chained_draft): the model drafts a verify step's
//    sequences right behind it, where acceptance is found on the device, before the host has the step's tokens.
//    after_chained_step records which sequences that draft in flight covers; propose() hands out placeholders for
//    their drafts (token 0, confidence 0; draft_row names the draft's tokens on the device) until settle() brings the
//    blocks, and checks that the device anchored each one where the host's acceptance says.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "src/engine/drafter.h"
#include "src/engine/scheduler.h"
#include "src/model/causal_lm.h"
#include "src/model/draft_module.h"

namespace deepinfer {

class ModelDrafter : public Drafter {
 public:
  // Sampled requests draw their drafts on a random stream of their own: the request's seed + this (as DeepSeek's
  // engine separates them), which leaves the target's stream, and so the output, as it is.
  static constexpr uint64_t kDraftSeedOffset = 1000000007;

  // `module`: the model's, enabled.
  explicit ModelDrafter(const DraftModule& module) : module_(module), block_size_(module.block_size()) {}
  // Up to max_drafts of the sequence's block: its tokens, or (a block in flight) placeholders.
  DraftProposal propose(const Sequence& seq, int64_t max_drafts) override;
  // In order: the scheduler has recorded the step `batch`, which `forward` ran (the model's last forward); drafts for
  // its sequences that are ready to decode.
  virtual void after_step(const ScheduledBatch& batch, const ForwardBatch& forward, KvCache& cache) = 0;
  // The sampling row a sequence's drafts are drawn with (the position is the model's to set).
  static SamplingRow sampling_row(const Sequence& seq);

  // Chained: the verify step `batch` (postprocessed) has a draft in flight of one block per item, in order; the items
  // still decoding expect theirs.
  void after_chained_step(const ScheduledBatch& batch);
  // The draft in flight's blocks (DraftModule::finish_chained_draft).
  void settle(std::vector<DraftBlock> blocks);
  // The row of the draft in flight's tokens that draft k of `seq` will be (ForwardBatch::tokens_from_draft); -1 where
  // seq's drafts are not in flight.
  int32_t draft_row(const Sequence& seq, int64_t k) const;

 protected:
  // In order: seq's block, drafted at its last token (position num_tokens() - 1); or none.
  void hold(const Sequence& seq, DraftBlock block);
  void drop(const Sequence& seq) { pending_.erase(&seq); }
  // Whether a sequence the step ran is ready to draft: running, all but its last token cached.
  static bool ready(const Sequence& seq) {
    return seq.status == SequenceStatus::kRunning && seq.num_cached == seq.num_tokens() - 1;
  }

  const DraftModule& module_;

 private:
  struct Pending {
    int64_t position = -1;  // where the first drafted token would land
    DraftBlock block;
    int64_t in_flight = -1;  // the block's index in the draft in flight (-1: the block is here)
  };
  int64_t block_size_;
  std::unordered_map<const Sequence*, Pending> pending_;
  std::vector<const Sequence*> in_flight_;  // the draft in flight's blocks' sequences (null: one that stopped)
};

}  // namespace deepinfer
