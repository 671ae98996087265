// Speculative decoding's drafter from DeepSeek-V4.1's DSpark module (CausalLm::dspark_draft). The main forward keeps
// the draft layers' keys current for every row it runs (the model writes them); after every step the engine hands
// this drafter the step's sequences, and for each one ready to decode (all but its last token cached) it drafts a
// block in one batched draft forward: [last token, noise...] -> dspark_block_size tokens with their confidences.
// Greedy requests draft greedily; sampled ones draw their drafts with the request's sampling on a stream of their
// own (the request's seed + kDraftSeedOffset, as DeepSeek's engine separates them), which leaves the target's
// stream, and so the output, as it is.
//
// Chained drafts (the engine's overlapped scheduling, CausalLm::start_dspark_draft): the model drafts a verify step's
// sequences right behind it, where their acceptance is found, before the host has the step's tokens. The drafter
// then knows which sequences that draft in flight covers, proposes their drafts as placeholders (rows of the draft's
// tokens on the device, draft_row) until settle() brings the blocks, and checks that the device anchored each one
// where the host's acceptance says.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "src/engine/drafter.h"
#include "src/engine/scheduler.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

class DsparkDrafter final : public Drafter {
 public:
  static constexpr uint64_t kDraftSeedOffset = 1000000007;

  explicit DsparkDrafter(const CausalLm& model) : model_(model) {}
  // The drafts of a sequence: its block's, or (a block still in flight) placeholders of token 0 and confidence 0.
  DraftProposal propose(const Sequence& seq, int64_t max_drafts) override;
  // The scheduler has recorded the step `batch`; drafts for its sequences that are ready to decode.
  void after_step(const ScheduledBatch& batch, KvCache& cache);
  // The sampling row a sequence's draft is drawn with (the draft's own random stream; the position is the model's).
  static SamplingRow sampling_row(const Sequence& seq);

  // Chained drafts: the verify step `batch` (postprocessed) has a draft in flight of one block per item, in order;
  // the items still decoding expect theirs.
  void after_chained_step(const ScheduledBatch& batch);
  // The draft in flight's blocks (CausalLm::finish_dspark_draft).
  void settle(std::vector<CausalLm::DraftBlock> blocks);
  // The row of the draft in flight's tokens that draft k of `seq` will be (ForwardBatch::tokens_from_draft); -1 where
  // seq's drafts are not in flight.
  int32_t draft_row(const Sequence& seq, int64_t k) const;

 private:
  struct Pending {
    int64_t position = -1;  // where the first drafted token would land
    CausalLm::DraftBlock block;
    int64_t in_flight = -1;  // the block's index in the draft in flight (-1: the block is here)
  };
  const CausalLm& model_;
  std::unordered_map<const Sequence*, Pending> pending_;
  std::vector<const Sequence*> in_flight_;  // the draft in flight's blocks' sequences (null: one that stopped)
};

}  // namespace deepinfer
