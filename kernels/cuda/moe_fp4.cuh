// Routed experts with FP4 weights, as DeepSeek-V4's checkpoints store them (the CPU forms of the conversions:
// kernels/cpu/fp4_weights.h, same names; the layout and rounding: kernels/fp_formats.h). Hopper has no FP4 MMA, so
// the values are dequantised in registers:
//   quantize_fp4_rows / dequantize_fp4_rows   bf16 rows of `cols` (a multiple of 32) <-> codes [rows, cols / 2] and
//                                             ue8m0 scales [rows, cols / 32]; a thread per 32-value block
//   moe_gemv_gate_up_fp4  act[t, k, :] = bf16(silu(W_gate[e] . x[t]) * (W_up[e] . x[t])), e = ids[t, k], clamped
//                         first where swiglu_limit > 0 (clamp_swiglu)
//   moe_gemv_down_fp4     out[t] = bf16(out[t] + sum_k weights[t, k] * (W_down[e] . act[t, k]))  (k in order)
// The matrix-vector forms of moe_gemv.cuh, for any number of (token, expert) pairs: a warp per weight row, each
// lane 8 values (4 bytes of codes, their scale byte) a step against the input row in shared memory. Expert e's
// gate_up rows [2 * inter, hidden] (gate rows, then up rows) start at e * 2 * inter rows, its down rows [hidden,
// inter] at e * hidden rows. Pairs with ids[t, k] >= num_experts (served on another rank) give zero activations
// and add nothing. hidden and inter multiples of 32 (a scale block), the input rows within 48 KB of shared memory
// (moe_gemv_fp4_supports).
//   moe_grouped_gemv_fp4  the same two projections with each expert's rows streamed once for up to 4 of its pairs
//                         at a time instead of once a pair: the pairs sorted by expert on the device first
//                         (moe_route over the ids, num_ids >= num_experts places), a block per (expert, tile of
//                         rows); act_perm [T * K, inter] bf16 (scratch) and y_perm [T * K, hidden] fp32, the
//                         permuted rows' unweighted products, in moe_route's row order
//   moe_grouped_combine   out[t] = bf16(out[t] + sum_k weights[t, k] * y_perm[row_of[t, k]]) (k in order, ids >=
//                         num_experts skipped): with the two above, the bits of the per-pair kernels
//   moe_grouped_mma_fp4   moe_grouped_gemv_fp4's work on the tensor cores, 8 pairs an expert at a time (the weights
//                         decoded to bf16 in registers, exactly; fp32 sums in the MMA's order, so not the per-pair
//                         kernels' bits), then moe_grouped_combine: for experts of more pairs (a drafter's 128 experts
//                         under 900 pairs), where the CUDA-core form's products cost more than the expert's bytes
// The grouped forms are for decode steps whose experts take a few pairs each. moe_grouped_gemv_fp4_supports: hidden
// and inter multiples of 32, four rows of either within 96 KB of shared memory; moe_grouped_mma_fp4_supports:
// multiples of 128, eight rows within 100 KB.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

struct Fp4Rows {
  const uint8_t* codes = nullptr;   // [rows, cols / 2]
  const uint8_t* scales = nullptr;  // [rows, cols / 32]
};

void quantize_fp4_rows(const __nv_bfloat16* x, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales,
                       cudaStream_t stream);
void dequantize_fp4_rows(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                         __nv_bfloat16* out, cudaStream_t stream);

bool moe_gemv_fp4_supports(int64_t hidden, int64_t inter, int64_t top_k);
void moe_gemv_gate_up_fp4(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, float swiglu_limit,
                          __nv_bfloat16* act, cudaStream_t stream);
void moe_gemv_down_fp4(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens,
                       int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows down,
                       __nv_bfloat16* out, cudaStream_t stream);


bool moe_grouped_gemv_fp4_supports(int64_t hidden, int64_t inter);
void moe_grouped_gemv_fp4(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, Fp4Rows down,
                          float swiglu_limit, __nv_bfloat16* act_perm, float* y_perm, cudaStream_t stream);
bool moe_grouped_mma_fp4_supports(int64_t hidden, int64_t inter);
void moe_grouped_mma_fp4(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                         int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, Fp4Rows down,
                         float swiglu_limit, __nv_bfloat16* act_perm, float* y_perm, cudaStream_t stream);
void moe_grouped_combine(const float* y_perm, const int32_t* ids, const int32_t* row_of, const float* weights,
                         int64_t tokens, int64_t top_k, int64_t num_experts, int64_t hidden, __nv_bfloat16* out,
                         cudaStream_t stream);

}  // namespace deepinfer::cuda
