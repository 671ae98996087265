// Routed experts with FP8 weights as DeepSeek-V3's checkpoints store them: e4m3 codes and an fp32 scale a
// block x block tile (fp8_linear.cuh's layout). The CPU form: dequantise (kernels/cpu/fp8_weights.h,
// dequantize_fp8_scaled) and run the experts.
//   moe_gemv_gate_up_fp8  act[t, k, :] = bf16(silu(W_gate[e] . x[t]) * (W_up[e] . x[t])), e = ids[t, k], clamped
//                         first where swiglu_limit > 0 (clamp_swiglu)
//   moe_gemv_down_fp8     out[t] = bf16(out[t] + sum_k weights[t, k] * (W_down[e] . act[t, k]))  (k in order)
// moe_gemv.cuh's matrix-vector forms for any number of (token, expert) pairs: a warp per weight row, each lane 16
// codes (one 16-byte load) under one scale a step against the input row in shared memory, 16 products summed, then
// scaled. Expert e's gate_up rows [2 * inter, hidden] (gate rows, then up rows) start at e * 2 * inter rows, its
// down rows [hidden, inter] at e * hidden rows; a tile never spans two experts or gate and up (inter and hidden
// multiples of the block). Pairs with ids[t, k] >= num_experts (served on another rank) give zero activations and
// add nothing. moe_gemv_fp8_supports: hidden and inter multiples of 16 and of the block (a multiple of 16), the
// input rows within 48 KB of shared memory.
//   moe_grouped_gemv_fp8  the same two projections with each expert's codes streamed once for up to 4 of its pairs at
//                         a time: the pairs sorted by expert on the device first (moe_route over the ids, num_ids >=
//                         num_experts places), a block per (expert, tile of rows); act_perm [T * K, inter] bf16
//                         (scratch) and y_perm [T * K, hidden] fp32, the permuted rows' unweighted products in
//                         moe_route's row order, summed by moe_grouped_combine (moe_fp4.cuh). Each product's sum runs
//                         in the per-pair kernels' order. moe_grouped_gemv_fp8_supports: moe_gemv_fp8's rules, four
//                         input rows within 96 KB.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

struct Fp8Rows {
  const uint8_t* codes = nullptr;  // [rows, cols]
  const float* scales = nullptr;   // [rows / block, ceil(cols / block)]
  int32_t block = 128;
};

bool moe_gemv_fp8_supports(int64_t hidden, int64_t inter, int64_t top_k, int64_t block);
void moe_gemv_gate_up_fp8(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows gate_up, float swiglu_limit,
                          __nv_bfloat16* act, cudaStream_t stream);
void moe_gemv_down_fp8(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens,
                       int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows down,
                       __nv_bfloat16* out, cudaStream_t stream);
bool moe_grouped_gemv_fp8_supports(int64_t hidden, int64_t inter, int64_t block);
void moe_grouped_gemv_fp8(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows gate_up, Fp8Rows down,
                          float swiglu_limit, __nv_bfloat16* act_perm, float* y_perm, cudaStream_t stream);

}  // namespace deepinfer::cuda
