// Token sampling from one row of logits: greedy (temperature 0), or temperature, top-k and top-p with a
// seeded Philox stream per request, indexed by the token's position (so results do not depend on batching).
#pragma once

#include <cstdint>
#include <vector>

#include "src/engine/request.h"

namespace deepinfer {

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, int64_t position,
                     std::vector<float>& scratch);

}  // namespace deepinfer
