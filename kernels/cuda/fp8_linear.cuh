// Linear layers with FP8 weights, as DeepSeek-V4's checkpoints store the attention projections: e4m3fn codes
// [n, k] with a ue8m0 scale byte for each 32 x 32 block, [n / 32, k / 32] (the CPU forms of the conversions:
// kernels/cpu/fp8_weights.h, same names; n and k multiples of 32).
//   quantize_fp8_blocks / dequantize_fp8_blocks   bf16 [n, k] <-> codes and scales (a block of threads per 32 x 32)
//   linear_gemv_fp8   y[t, j] = x[t, :] . W[j, :] for t < m <= kLinearGemvMaxRows: a warp per output column, each
//                     lane 16 codes (one 16-byte load) a step, converted two at a time by the hardware's e4m3x2
//                     conversion; x bf16 rows x_row apart, y bf16 or fp32 rows y_row apart (multiples of 8)
// The model runs it up to 2 rows (kFp8GemvMaxLinearRows), the skinny tensor-core kernel's FP8 form
// (linear_skinny.cuh) up to 64, and above dequantises the weight into scratch for the bf16 GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void quantize_fp8_blocks(const __nv_bfloat16* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales,
                         cudaStream_t stream);
void dequantize_fp8_blocks(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, __nv_bfloat16* out,
                           cudaStream_t stream);
void linear_gemv_fp8(const __nv_bfloat16* x, int64_t x_row, const uint8_t* codes, const uint8_t* scales, void* y,
                     int64_t y_row, bool y_fp32, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace deepinfer::cuda
