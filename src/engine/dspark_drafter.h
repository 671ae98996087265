// Speculative decoding's drafter from DeepSeek-V4.1's DSpark module (CausalLm::dspark_draft). The main forward keeps
// the draft layers' keys current for every row it runs (the model writes them); after every step the engine hands
// this drafter the step's sequences, and for each one ready to decode (all but its last token cached) it drafts a
// block in one batched draft forward: [last token, noise...] -> dspark_block_size tokens with their confidences.
// Greedy requests draft greedily; sampled ones draw their drafts with the request's sampling on a stream of their
// own (the request's seed + kDraftSeedOffset, as DeepSeek's engine separates them), which leaves the target's
// stream, and so the output, as it is.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "src/engine/drafter.h"
#include "src/engine/scheduler.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

class DsparkDrafter final : public Drafter {
 public:
  static constexpr uint64_t kDraftSeedOffset = 1000000007;

  explicit DsparkDrafter(const CausalLm& model) : model_(model) {}
  DraftProposal propose(const Sequence& seq, int64_t max_drafts) override;
  // The scheduler has recorded the step `batch`; drafts for its sequences that are ready to decode.
  void after_step(const ScheduledBatch& batch, KvCache& cache);

 private:
  struct Pending {
    int64_t position = -1;  // where the first drafted token would land
    CausalLm::DraftBlock block;
  };
  const CausalLm& model_;
  std::unordered_map<const Sequence*, Pending> pending_;
};

}  // namespace deepinfer
