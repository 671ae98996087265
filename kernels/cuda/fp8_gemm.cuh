// FP8 GEMMs at the tensor cores' FP8 rate with DeepSeek's scaling, as its inference runs V3's and R1's Linear layers
// (DeepGEMM's contract): activations quantised per token and 128 channels, weights as the checkpoint stores them (e4m3
// codes [n, k] and an fp32 scale a 128 x 128 tile, Fp8BlockScales::fp32(..., 128)). The CPU forms:
// kernels/cpu/fp8_weights.h (quantize_fp8_activations) and cpu::linear on the dequantised values.
//   quantize_fp8_activations  bf16 x [rows, k], rows x_row apart -> e4m3 codes [rows, k] and a scale a row and 128
//                     columns (amax / 448, 1 for a zero group; 16 threads a group; x 16-byte aligned, x_row a multiple
//                     of 8), stored with the rows fastest, fp8_activation_scale_stride(rows) apart: [k / 128, stride]
//                     (CUTLASS loads them with TMA, whose strides are multiples of 16 bytes; the padding, written 1,
//                     scales only rows of the tile that are not stored)
//   fp8_gemm          y[m, n] (bf16, rows y_row apart) = sum over k of x's codes * their scale * w's codes * its tile's
//                     scale, accumulated in fp32 with the scales applied per 128 columns: CUTLASS 4's Hopper kernel
//                     (KernelTmaWarpSpecializedCooperativeFP8Blockwise, tiles 128 x 128 x 128, clusters of 1 x 2),
//                     built for sm_90a in kernels/cuda_sm90a. Shapes: fp8_gemm_supports. `workspace` holds
//                     fp8_gemm_workspace_bytes(m, n, k) (kernels never allocate). Pointers 16-byte aligned. False
//                     where the pointers or CUTLASS refused the arguments (nothing launched). CUTLASS clears the
//                     stream's pending error after its launch: check earlier launches before calling.
//                     x_scale_stride: the scales' row stride where x is rows of a larger quantised block (an
//                     expert's rows of the permuted tokens: x_scales then points at its first row's scale; a
//                     multiple of 4); 0: fp8_activation_scale_stride(m).
// fp8_gemm_supports is false on a GPU other than compute capability 9.0, where the model keeps its bf16 path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/fp8_linear.cuh"

namespace deepinfer::cuda {

inline constexpr int64_t kFp8GemmGroup = 128;  // the activations' scale group and the weights' tile

// k and n multiples of 128, the weight's scales fp32 per 128 x 128, y rows 8-element aligned, and the current device
// of compute capability 9.0.
DEEPINFER_HOST_DEVICE inline int64_t fp8_activation_scale_stride(int64_t rows) { return (rows + 3) / 4 * 4; }

bool fp8_gemm_supports(int64_t m, int64_t n, int64_t k, const Fp8BlockScales& w_scales, int64_t y_row);
size_t fp8_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k);

// source_rows [rows] (optional): row r of the codes from x's row source_rows[r], a row of zeros where it is negative
// (moe_pad_sources: an expert's padded rows read from the tokens' rows where they are).
void quantize_fp8_activations(const __nv_bfloat16* x, int64_t x_row, int64_t rows, int64_t k, uint8_t* codes,
                              float* scales, cudaStream_t stream, const int32_t* source_rows = nullptr);
// quantize_fp8_activations of silu_mul's output (silu_mul.cuh: gate_up [rows, 2 inter] -> [rows, inter], rounded to
// bf16 as it stores it) without storing that output: the same codes and scales as the two launches.
void quantize_fp8_silu_mul(const __nv_bfloat16* gate_up, int64_t rows, int64_t inter, float swiglu_limit,
                           uint8_t* codes, float* scales, cudaStream_t stream);
// The activations as the GEMM sees them, in bf16: x[r, c] = bf16(code * its scale) (a reference path's input).
void dequantize_fp8_activations(const uint8_t* codes, const float* scales, int64_t rows, int64_t k,
                                __nv_bfloat16* x, cudaStream_t stream);
[[nodiscard]] bool fp8_gemm(const uint8_t* x_codes, const float* x_scales, const uint8_t* w_codes,
                            const float* w_scales, __nv_bfloat16* y, int64_t y_row, int64_t m, int64_t n, int64_t k,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream,
                            int64_t x_scale_stride = 0);

}  // namespace deepinfer::cuda
