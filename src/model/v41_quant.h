// The quantisation V4.1 applies inside its forward pass ("QAT semantics": part of the model even when the
// weights are not quantised), computed in fp32 exactly as transformers' deepseek_v41 does:
//  - window KV: FP8 e4m3 per 32 channels with power-of-two (ue8m0) scales;
//  - compressed KV: FP4 e2m1 per 16 channels with e4m3 scales;
//  - indexer queries and keys: FP4 e2m1 per 32 channels with power-of-two scales.
// Each quantises then dequantises in place. A row whose length the block does not divide is left as it is.
#pragma once

#include <cstdint>

namespace deepinfer::v41 {

// Round to the nearest float8 e4m3fn value (ties to even); |x| <= 448 expected.
float round_e4m3(float x);
// 2^ceil(log2(t)) for t > 0, from the float's bits as the reference kernel does.
float pow2_ceil(float t);
// The e2m1 value nearest to x in [-6, 6] (the reference's tie rules).
float round_e2m1(float x);

void fake_quant_fp8(float* x, int64_t n, int64_t block = 32);
void fake_quant_fp4(float* x, int64_t n, int64_t block, bool e4m3_scales);

}  // namespace deepinfer::v41
