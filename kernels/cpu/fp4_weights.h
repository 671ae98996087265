// FP4 weights on the CPU, the reference forms of kernels/cuda/moe_fp4.cuh's conversions (same names): rows of
// `cols` values (a multiple of 32) as e2m1 codes, two a byte, [rows, cols / 2], and a ue8m0 scale byte for each 32
// values, [rows, cols / 32] (kernels/fp_formats.h: e2m1_code, ue8m0_scale_byte). A block's scale is the power of
// two fp4_block_scale picks from its largest magnitude, so values that are FP4 already (a checkpoint's, dequantised
// on load) quantise back to themselves.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

void quantize_fp4_rows(const float* x, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales);
void dequantize_fp4_rows(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, float* out);

}  // namespace deepinfer::cpu
