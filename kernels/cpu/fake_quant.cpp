#include "kernels/cpu/fake_quant.h"

#include <algorithm>
#include <cmath>

#include "kernels/fp_formats.h"

namespace deepinfer::cpu {

namespace {

float block_amax(const float* x, int64_t block) {
  float amax = 0.0f;
  for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

void fake_quant_fp8(float* x, int64_t rows, int64_t n, int64_t block) {
  if (n % block != 0) return;
  for (int64_t b = 0; b < rows * n; b += block) {
    const float scale = fp8_block_scale(block_amax(x + b, block));
    for (int64_t i = b; i < b + block; ++i) x[i] = fp8_dequantised(x[i], scale);
  }
}

void fake_quant_fp4(float* x, int64_t rows, int64_t n, int64_t block, bool e4m3_scales) {
  if (n % block != 0) return;
  for (int64_t b = 0; b < rows * n; b += block) {
    const float scale = fp4_block_scale(block_amax(x + b, block), e4m3_scales);
    for (int64_t i = b; i < b + block; ++i) x[i] = fp4_dequantised(x[i], scale);
  }
}

void encode_fp4_rows(const float* x, int64_t rows, int64_t n, int64_t block, bool e4m3_scales, uint8_t* codes,
                     uint8_t* scales) {
  for (int64_t b = 0; b < rows * n / block; ++b) {
    const float* v = x + b * block;
    const float scale = fp4_block_scale(block_amax(v, block), e4m3_scales);
    scales[b] = static_cast<uint8_t>(fp4_scale_byte(scale, e4m3_scales));
    for (int64_t i = 0; i < block; i += 2) {
      codes[(b * block + i) / 2] =
          static_cast<uint8_t>(e2m1_code_signed(v[i] / scale) | (e2m1_code_signed(v[i + 1] / scale) << 4));
    }
  }
}

void decode_fp4_rows(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t n, int64_t block,
                     bool e4m3_scales, float* out) {
  for (int64_t i = 0; i < rows * n; ++i) {
    const uint32_t code = (codes[i / 2] >> (4 * (i % 2))) & 15u;
    out[i] = e2m1_value(code) * fp4_scale_value(scales[i / block], e4m3_scales);
  }
}

}  // namespace deepinfer::cpu
