// Speculative decoding's drafter from DeepSeek-V4.1's DSpark module (DraftModule::dspark_draft). The main forward keeps
// the draft layers' keys current for every row it runs (the model writes them); after every step the engine hands
// this drafter the step's sequences, and for each one ready to decode (all but its last token cached) it drafts a
// block in one batched draft forward: [last token, noise...] -> block_size tokens with their confidences.
// Greedy requests draft greedily; sampled ones draw their drafts with the request's sampling on the draft's own
// random stream (ModelDrafter::sampling_row). Chained behind their verify steps: model_drafter.h.
#pragma once

#include "src/engine/model_drafter.h"

namespace deepinfer {

class DsparkDrafter final : public ModelDrafter {
 public:
  using ModelDrafter::ModelDrafter;
  void after_step(const ScheduledBatch& batch, const ForwardBatch& forward, KvCache& cache) override;
};

}  // namespace deepinfer
