// The routed experts of an expert-sorted batch (moe_permute's x_perm and expert_offsets) as one persistent
// tensor-core kernel that reads the row ranges from the device: no host round trip, so decode steps of any batch
// size below kMoeGroupedMaxPairs can be captured in a CUDA graph, and each weight tile is streamed once for all of
// its expert's rows (up to 64 rows a pass), as decode wants. Both projections run in the one launch:
//   act[r] = bf16(silu(W_gate[e] . x[r]) * (W_up[e] . x[r]))   for r in [offsets[e], offsets[e+1])
//   y[r]   = bf16(W_down[e] . act[r])
// A down tile of a pass starts once all of that pass's gate/up tiles are written (counters in `workspace`).
// Weights: gate_up [E, 2 * inter, hidden] (gate rows, then up rows), down [E, hidden, inter]. hidden and inter
// must be multiples of 8 (16-byte row pieces); rows past offsets[E] are not written. The workspace
// (moe_grouped_workspace_bytes for `pairs` >= offsets[E]) is zeroed by the launch itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

size_t moe_grouped_workspace_bytes(int64_t pairs, int64_t num_experts);

void moe_grouped_mlp(const __nv_bfloat16* x, const int32_t* expert_offsets, int64_t num_experts, int64_t pairs,
                     int64_t hidden, int64_t inter, const __nv_bfloat16* gate_up, const __nv_bfloat16* down,
                     __nv_bfloat16* act, __nv_bfloat16* y, int num_sms, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

}  // namespace deepinfer::cuda
