#include "kernels/cpu/fp4_weights.h"

#include <algorithm>
#include <cmath>

#include "kernels/fp_formats.h"

namespace deepinfer::cpu {

void quantize_fp4_rows(const float* x, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    scales[b] = ue8m0_scale_byte(amax);
    const float scale = ue8m0_value(scales[b]);
    for (int i = 0; i < 32; i += 2) {
      const float lo = std::clamp(v[i] / scale, -6.0f, 6.0f), hi = std::clamp(v[i + 1] / scale, -6.0f, 6.0f);
      codes[b * 16 + i / 2] = static_cast<uint8_t>(e2m1_code(lo) | (e2m1_code(hi) << 4));
    }
  }
}

void dequantize_fp4_rows(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, float* out) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint32_t byte = codes[i / 2];
    out[i] = e2m1_value(i % 2 == 0 ? byte & 0xfu : byte >> 4) * ue8m0_value(scales[i / 32]);
  }
}

}  // namespace deepinfer::cpu
