// The quantisation V4.1 applies inside its forward pass ("QAT semantics": part of the model even when the weights
// are not quantised), on the CPU, the reference forms of kernels/cuda/fake_quant.cuh (same names). Each row of n
// values is quantised per block of `block` channels and dequantised in place; a row whose length the block does
// not divide is left as it is.
//  - fake_quant_fp8: e4m3 with power-of-two scales (the window KV, blocks of 32);
//  - fake_quant_fp4: e2m1 with e4m3 scales (the compressed KV, blocks of 16) or power-of-two ones (the indexer's
//    queries and keys, blocks of 32).
// The formats and rounding rules: kernels/fp_formats.h.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

void fake_quant_fp8(float* x, int64_t rows, int64_t n, int64_t block);
void fake_quant_fp4(float* x, int64_t rows, int64_t n, int64_t block, bool e4m3_scales);

// The bytes of what fake_quant_fp4 makes of rows, as the CUDA cache keeps the compressed entries and indexer keys:
// e2m1 codes, two a byte (the even value in the low nibble) [rows, n / 2], and a scale byte a block [rows, n / block]
// (the e4m3 code or the ue8m0 byte of the scale fake_quant_fp4 picks), from the rows before their quantisation (a
// scale re-picked from quantised values can differ: e4m3 scales are coarse below 2^-6). decode_fp4_rows gives
// fake_quant_fp4's values bit for bit.
void encode_fp4_rows(const float* x, int64_t rows, int64_t n, int64_t block, bool e4m3_scales, uint8_t* codes,
                     uint8_t* scales);
void decode_fp4_rows(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t n, int64_t block,
                     bool e4m3_scales, float* out);

}  // namespace deepinfer::cpu
