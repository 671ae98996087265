// The routed experts of an expert-sorted batch (moe_permute's x_perm and expert_offsets) as one tensor-core
// kernel per projection that reads the row ranges from the device: no host round trip, so decode steps of any
// batch size below kMoeGroupedMaxPairs can be captured in a CUDA graph, and each block streams its slice of one
// expert's weights once for all of that expert's rows (up to 64 rows a pass), as decode wants.
//   moe_grouped_gate_up: act[r] = bf16(silu(W_gate[e] . x[r]) * (W_up[e] . x[r])) for r in [offsets[e], offsets[e+1])
//   moe_grouped_down:    y[r]   = bf16(W_down[e] . act[r])
// Weights: gate_up [E, 2 * inter, hidden] (gate rows, then up rows), down [E, hidden, inter]. hidden and inter
// must be multiples of 8 (16-byte rows pieces); rows past offsets[E] are not written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void moe_grouped_gate_up(const __nv_bfloat16* x, const int32_t* expert_offsets, int64_t num_experts, int64_t hidden,
                         int64_t inter, const __nv_bfloat16* gate_up, __nv_bfloat16* act, cudaStream_t stream);
void moe_grouped_down(const __nv_bfloat16* act, const int32_t* expert_offsets, int64_t num_experts, int64_t hidden,
                      int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* y, cudaStream_t stream);

}  // namespace deepinfer::cuda
