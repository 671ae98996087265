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

}  // namespace deepinfer::cpu
