// The routed experts of a few tokens as matrix-vector products, with no host synchronisation (no expert
// offsets to read back, nothing to permute): the decode path at small batch, where the grouped GEMM's
// permute / offsets / unpermute round trip costs more than the expert weights take to stream.
//   moe_gemv_gate_up: act[t, k, :] = bf16(silu(W_gate[e] . x[t]) * (W_up[e] . x[t])), e = ids[t, k] (clamped
//                     first where swiglu_limit > 0: clamp_swiglu)
//   moe_gemv_down:    out[t] = bf16(out[t] + sum_k weights[t, k] * (W_down[e] . act[t, k]))  (k in order)
// Weights: gate_up [E, 2 * inter, hidden] (gate rows, then up rows), down [E, hidden, inter]; rows are read
// in 16-byte pieces, so hidden and inter must be multiples of 8. act: [tokens * top_k, inter] scratch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void moe_gemv_gate_up(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k, int64_t hidden,
                      int64_t inter, const __nv_bfloat16* gate_up, float swiglu_limit, __nv_bfloat16* act,
                      cudaStream_t stream);
void moe_gemv_down(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens, int64_t top_k,
                   int64_t hidden, int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
