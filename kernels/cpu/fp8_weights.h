// FP8 weights on the CPU, the reference forms of kernels/cuda/fp8_linear.cuh's conversions (same names): a
// [n, k] weight (n and k multiples of 32) as e4m3fn codes [n, k] and a ue8m0 scale byte for each 32 x 32 block,
// [n / 32, k / 32] (kernels/fp_formats.h: e4m3_code, fp8_weight_scale_byte). A block's scale is the power of two
// that brings its largest magnitude within 448, so values that are FP8 already (a checkpoint's, dequantised on
// load) quantise back to themselves.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

void quantize_fp8_blocks(const float* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales);
void dequantize_fp8_blocks(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, float* out);

}  // namespace deepinfer::cpu
