// Drafts chained behind their verify step on the device (DraftModule::start_chained_draft), the state both CUDA models
// share: the last started verify step's acceptance (found by cuda::accept_drafts behind its sampling), the started
// draft's results in buffers that outlive the step pools (the next verify step's draft rows are filled from them
// before the host has them), and their copy back to pinned memory behind an event. One draft in flight at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/device_array.h"
#include "src/model/forward_batch.h"
#include "src/model/cuda/device_memory.h"

namespace deepinfer {

class DraftChain {
 public:
  // After a started verify step's sampling, on its stream: each sequence's accepted drafts and next token, from the
  // step's input tokens and draws on the device (uploads through `pool`, the step's).
  void accept(const ForwardBatch& verify, const int32_t* token_ids, const int32_t* drawn, ScratchPool& pool);
  // A draft of the last accepted step's `sequences` starts: its acceptance (null before accept) is taken.
  void begin(int64_t sequences);
  const int32_t* accepted() const { return accepted_.data(); }  // [sequences]
  const int32_t* anchors() const { return anchors_.data(); }    // [sequences]: each one's next token

  // The started draft's results: `rows` tokens and two float scores a row (grown as needed; a growth synchronises).
  struct Outputs {
    int32_t* tokens;
    float *score_a, *score_b;
  };
  Outputs outputs(int64_t rows);
  // Behind the draft's work: its results and the acceptance copied back; `positions` its blocks' anchors before
  // acceptance (one a sequence).
  void started(std::vector<int64_t> positions, int64_t rows);
  // Waits for the started draft's copy; its results on the host (valid until the next draft starts).
  struct Results {
    const int32_t* tokens;
    const float *score_a, *score_b;
    std::vector<int64_t> positions;  // each block's anchor after acceptance
  };
  Results finish();
  bool outstanding() const { return outstanding_; }
  // A verify step's draft rows take the started draft's tokens (ForwardBatch::tokens_from_draft), on the stream.
  void fill_inputs(int32_t* token_ids, const std::vector<int32_t>& targets, ScratchPool& pool);

 private:
  DeviceArray<int32_t> accepted_{1}, anchors_{1};
  int64_t accepted_sequences_ = -1;  // -1: no acceptance since the last draft began
  DeviceArray<int32_t> tokens_{1};
  DeviceArray<float> score_a_{1}, score_b_{1};
  DeviceArray<int32_t> fill_targets_{1};
  MappedHostArray host_;  // tokens, scores, acceptance
  CudaEvent copied_;
  std::vector<int64_t> positions_;
  int64_t rows_ = 0;
  bool outstanding_ = false;
};

}  // namespace deepinfer
