// Speculative decoding's drafter from the model's own MTP module (DeepSeek-V3's nextn layer,
// CausalLm::mtp_draft). After every step (prefill chunks too) the engine hands it the rows the step added to each
// sequence's cache; it runs the module over them — position i with the token after it and the main model's hidden
// state at i, which the model kept from the step — which keeps the module's cache layer current and, from the last
// of them, drafts the token after the sequence's next one: the argmax, its probability the confidence. One MTP layer
// drafts one token a step.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "src/engine/drafter.h"
#include "src/engine/scheduler.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

class MtpDrafter final : public Drafter {
 public:
  explicit MtpDrafter(const CausalLm& model) : model_(model) {}
  DraftProposal propose(const Sequence& seq, int64_t max_drafts) override;
  // `forward` ran `batch` (the same sequences, in order) and was the model's last forward; the scheduler has
  // recorded the step, so each sequence's cache now reaches its num_cached.
  void after_step(const ScheduledBatch& batch, const ForwardBatch& forward, KvCache& cache);

 private:
  struct Pending {
    int64_t position = -1;  // where the drafted token would land
    int32_t token = 0;
    float confidence = 0;
  };
  const CausalLm& model_;
  std::unordered_map<const Sequence*, Pending> pending_;
};

}  // namespace deepinfer
