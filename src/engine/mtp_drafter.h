// Speculative decoding's drafter from the model's own MTP module (DeepSeek-V3's nextn layer,
// DraftModule::mtp_draft). After every step (prefill chunks too) the engine hands it the rows the step added to each
// sequence's cache; it runs the module over them — position i with the token after it and the main model's hidden
// state at i, which the model kept from the step — which keeps the module's cache layer current and, from the last
// of them, drafts the token after the sequence's next one: the argmax, its probability the confidence. One MTP layer
// drafts one token a step: a block of one. Chained behind their verify steps: model_drafter.h.
#pragma once

#include "src/engine/model_drafter.h"

namespace deepinfer {

class MtpDrafter final : public ModelDrafter {
 public:
  using ModelDrafter::ModelDrafter;
  // `forward` ran `batch` (the same sequences, in order) and was the model's last forward; the scheduler has
  // recorded the step, so each sequence's cache now reaches its num_cached.
  void after_step(const ScheduledBatch& batch, const ForwardBatch& forward, KvCache& cache) override;
};

}  // namespace deepinfer
