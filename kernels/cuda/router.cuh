// MoE routing on the GPU, the same function as kernels/cpu/router.h (its RouterParams; correction_bias is a
// device pointer): fp32 router logits [tokens, experts] -> top-k expert ids and combine weights.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cpu/router.h"

namespace deepinfer::cuda {

// Up to kRouteMaxExperts experts (each lane of a token's warp holds a 32nd of them) and top_k <= 32.
inline constexpr int64_t kRouteMaxExperts = 512;
void route_topk(const float* logits, int64_t num_tokens, const cpu::RouterParams& params, int32_t* topk_ids,
                float* topk_weights, cudaStream_t stream);

}  // namespace deepinfer::cuda
