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

// DeepSeek-V3's form: an fp32 scale for each block x block tile (fp8_tile_scale), [ceil(n / block), ceil(k / block)].
void quantize_fp8_scaled(const float* w, int64_t n, int64_t k, int64_t block, uint8_t* codes, float* scales);
void dequantize_fp8_scaled(const uint8_t* codes, const float* scales, int64_t n, int64_t k, int64_t block, float* out);
// Activations as DeepSeek's FP8 inference quantises them (kernels/cuda/fp8_gemm.cuh): x [rows, k], k a multiple of
// 128, as e4m3 codes [rows, k] and a scale a row and 128 columns (quantize_fp8_scaled's rule on a 1 x 128 tile),
// stored column-major [k / 128, rows].
void quantize_fp8_activations(const float* x, int64_t rows, int64_t k, uint8_t* codes, float* scales);
// Values that were FP8 in this form (a checkpoint's, dequantised: code x scale in fp32) back to their codes and
// scales, bit for bit where some scale reproduces every value of a tile (it tries the tile's largest value over each
// e4m3 magnitude, and the fp32 neighbours of each); a tile no scale reproduces is quantised as quantize_fp8_scaled.
void recover_fp8_scaled(const float* values, int64_t n, int64_t k, int64_t block, uint8_t* codes, float* scales);

}  // namespace deepinfer::cpu
