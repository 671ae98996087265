// Linear layers with FP8 weights: e4m3fn codes [n, k] with a scale for each block x block tile (Fp8BlockScales), as
// DeepSeek's checkpoints store them — V4's projections with a ue8m0 byte a 32 x 32 block (which this engine also
// writes when it quantises), V3's and R1's with an fp32 `weight_scale_inv` a 128 x 128 block. The CPU forms:
// kernels/cpu/fp8_weights.h, same names.
//   quantize_fp8_blocks / dequantize_fp8_blocks   bf16 [n, k] <-> codes and ue8m0 scales (a block of threads per
//                     32 x 32; n and k multiples of 32); dequantize_fp8_blocks also takes fp32 scales
//   quantize_fp8_scaled   bf16 [n, k] -> codes and fp32 scales per block x block tile, scale = amax / 448 as
//                     DeepSeek-V3's weights were quantised (the dummy weights of an FP8 V3; a checkpoint's codes
//                     and scales are uploaded as stored)
//   linear_gemv_fp8   y[t, j] = x[t, :] . W[j, :] for t < m <= kLinearGemvMaxRows: a warp per output column, each
//                     lane 16 codes (one 16-byte load) a step, converted two at a time by the hardware's e4m3x2
//                     conversion; x bf16 rows x_row apart, y bf16 or fp32 rows y_row apart (multiples of 8)
// The kernels read 16 codes under one scale: k a multiple of 16, the block a multiple of 16.
// The model runs it up to 2 rows (kFp8GemvMaxLinearRows), the skinny tensor-core kernel's FP8 form
// (linear_skinny.cuh, ue8m0 32 x 32 scales) up to 64, and above (or with fp32 scales) dequantises the weight into
// scratch for the bf16 GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/host_device.h"

namespace deepinfer::cuda {

// The scales of FP8 codes [n, k]: one per block x block tile, row-major [ceil(n / block), ceil(k / block)].
struct Fp8BlockScales {
  const void* data = nullptr;
  bool f32 = false;    // fp32 values, else ue8m0 bytes (2^(byte - 127))
  int32_t block = 32;  // ue8m0: 32

  static Fp8BlockScales ue8m0(const uint8_t* bytes) { return {bytes, false, 32}; }
  static Fp8BlockScales fp32(const float* values, int32_t block) { return {values, true, block}; }
  DEEPINFER_HOST_DEVICE int64_t per_row(int64_t k) const { return (k + block - 1) / block; }
  int64_t count(int64_t n, int64_t k) const { return (n + block - 1) / block * per_row(k); }
  int64_t bytes(int64_t n, int64_t k) const { return count(n, k) * (f32 ? 4 : 1); }
  // The scales of the rows from `first` (a multiple of block) of a weight of k columns.
  Fp8BlockScales from_row(int64_t first, int64_t k) const {
    Fp8BlockScales part = *this;
    part.data = static_cast<const uint8_t*>(data) + bytes(first, k);
    return part;
  }
};

void quantize_fp8_blocks(const __nv_bfloat16* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales,
                         cudaStream_t stream);
void quantize_fp8_scaled(const __nv_bfloat16* w, int64_t n, int64_t k, int32_t block, uint8_t* codes, float* scales,
                         cudaStream_t stream);
void dequantize_fp8_blocks(const uint8_t* codes, Fp8BlockScales scales, int64_t n, int64_t k, __nv_bfloat16* out,
                           cudaStream_t stream);
void linear_gemv_fp8(const __nv_bfloat16* x, int64_t x_row, const uint8_t* codes, Fp8BlockScales scales, void* y,
                     int64_t y_row, bool y_fp32, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace deepinfer::cuda
