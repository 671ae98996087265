// The routed experts of an expert-sorted batch (moe_route's token_of_row and expert_offsets) as one persistent
// tensor-core kernel that reads the row ranges from the device: no host round trip, so decode steps of any
// batch size below CudaDeepseekModel::kGroupedMaxPairs can be captured in a CUDA graph, and each block streams
// its slice of one expert's weights once for all of that expert's rows (up to 64 rows a pass), as decode wants.
// The gate/up projection reads each row's token straight from x, so the rows are never copied into expert order:
//   act[r] = bf16(silu(W_gate[e] . x[token_of_row[r]]) * (W_up[e] . x[token_of_row[r]]))  (clamped first where
//            swiglu_limit > 0: clamp_swiglu)
//   y[r]   = bf16(W_down[e] . act[r])                        for r in [offsets[e], offsets[e+1])
// Weights: gate_up [E, 2 * inter, hidden] (gate rows, then up rows), down [E, hidden, inter]. hidden and inter
// must be multiples of 8 (16-byte row pieces); rows past offsets[E] are not written. num_sms: the device's SM
// count (two blocks an SM). `sync`: moe_grouped_sync_ints(E) int32 on the device, zeroed by the caller once when
// allocated; each launch leaves it zeroed, and launches that share it must not overlap. Returns the error of the
// launch set-up (the weights' tensor maps, the shared-memory limit); the kernel's own errors surface through
// cudaGetLastError as usual.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

int64_t moe_grouped_sync_ints(int64_t num_experts);

cudaError_t moe_grouped_experts(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* expert_offsets,
                                int64_t num_experts, int64_t hidden, int64_t inter, const __nv_bfloat16* gate_up,
                                const __nv_bfloat16* down, float swiglu_limit, __nv_bfloat16* act,
                                __nv_bfloat16* y, int32_t* sync, int num_sms, cudaStream_t stream);

}  // namespace deepinfer::cuda
