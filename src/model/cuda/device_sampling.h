// The CUDA models' last step after the logits: one token per row drawn where the logits are (greedy rows by
// argmax, the others by the sampling kernel), only the tokens copied back.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/model/causal_lm.h"
#include "src/model/cuda/device_memory.h"

namespace deepinfer {

// logits [num_rows, vocab] fp32 on the device; `rows` the engine's sampling rows, one per logits row; `masks` (may
// be null) structured output's vocabulary masks, applied to the logits in place first, after the rows' fingerprints
// go to logits_hashes (may be null: not wanted; [num_rows] on the host). Waits for the tokens; throws
// where a row has no finite logit. `step_end` (optional) is recorded after the sampling kernels, before the copy
// back.
std::vector<int32_t> sample_on_device(float* logits, int64_t num_rows, int64_t vocab,
                                      std::span<const SamplingRow> rows, const TokenMasks* masks,
                                      uint64_t* logits_hashes, ScratchPool& scratch,
                                      cudaEvent_t step_end = nullptr);

}  // namespace deepinfer
