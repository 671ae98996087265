#include "kernels/cpu/fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/fp_formats.h"

namespace deepinfer::cpu {

void quantize_fp8_blocks(const float* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales) {
  for (int64_t br = 0; br < n / 32; ++br)
    for (int64_t bc = 0; bc < k / 32; ++bc) {
      float amax = 0.0f;
      for (int64_t r = br * 32; r < br * 32 + 32; ++r)
        for (int64_t c = bc * 32; c < bc * 32 + 32; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      const uint8_t byte = fp8_weight_scale_byte(amax);
      scales[br * (k / 32) + bc] = byte;
      const float scale = ue8m0_value(byte);
      for (int64_t r = br * 32; r < br * 32 + 32; ++r)
        for (int64_t c = bc * 32; c < bc * 32 + 32; ++c)
          codes[r * k + c] = static_cast<uint8_t>(e4m3_code(std::clamp(w[r * k + c] / scale, -448.0f, 448.0f)));
    }
}

void dequantize_fp8_blocks(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, float* out) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      out[r * k + c] = e4m3_value(codes[r * k + c]) * ue8m0_value(scales[(r / 32) * (k / 32) + c / 32]);
}

void quantize_fp8_scaled(const float* w, int64_t n, int64_t k, int64_t block, uint8_t* codes, float* scales) {
  const int64_t per_row = (k + block - 1) / block;
  for (int64_t r0 = 0; r0 < n; r0 += block)
    for (int64_t c0 = 0; c0 < k; c0 += block) {
      const int64_t r1 = std::min(n, r0 + block), c1 = std::min(k, c0 + block);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      const float scale = fp8_tile_scale(amax);
      scales[(r0 / block) * per_row + c0 / block] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          codes[r * k + c] = static_cast<uint8_t>(e4m3_code(std::clamp(w[r * k + c] / scale, -448.0f, 448.0f)));
    }
}

void quantize_fp8_activations(const float* x, int64_t rows, int64_t k, uint8_t* codes, float* scales) {
  constexpr int64_t kGroup = 128;
  std::vector<float> row_scales(k / kGroup);
  for (int64_t r = 0; r < rows; ++r) {  // a row is quantize_fp8_scaled's weight of one row, its tiles 1 x 128
    quantize_fp8_scaled(x + r * k, 1, k, kGroup, codes + r * k, row_scales.data());
    for (int64_t g = 0; g < k / kGroup; ++g) scales[g * rows + r] = row_scales[g];
  }
}

void dequantize_fp8_scaled(const uint8_t* codes, const float* scales, int64_t n, int64_t k, int64_t block,
                           float* out) {
  const int64_t per_row = (k + block - 1) / block;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      out[r * k + c] = e4m3_value(codes[r * k + c]) * scales[(r / block) * per_row + c / block];
}

namespace {

// Whether `scale` gives codes whose dequantised values are the tile's values exactly (the codes written).
bool reproduces(const float* values, int64_t k, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float scale,
                uint8_t* codes) {
  if (!(scale > 0.0f) || !std::isfinite(scale)) return false;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const float v = values[r * k + c];
      // (the largest value over its scale may round just past 448: clamped, and checked below like any other)
      const uint32_t code = e4m3_code(std::clamp(v / scale, -448.0f, 448.0f));
      if (e4m3_value(code) * scale != v) return false;
      codes[r * k + c] = static_cast<uint8_t>(code);
    }
  return true;
}

}  // namespace

void recover_fp8_scaled(const float* values, int64_t n, int64_t k, int64_t block, uint8_t* codes, float* scales) {
  quantize_fp8_scaled(values, n, k, block, codes, scales);
  const int64_t per_row = (k + block - 1) / block;
  for (int64_t r0 = 0; r0 < n; r0 += block)
    for (int64_t c0 = 0; c0 < k; c0 += block) {
      const int64_t r1 = std::min(n, r0 + block), c1 = std::min(k, c0 + block);
      float& scale = scales[(r0 / block) * per_row + c0 / block];
      if (reproduces(values, k, r0, r1, c0, c1, scale, codes)) continue;
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(values[r * k + c]));
      bool found = false;
      for (uint32_t code = 0x7e; code > 0 && !found; --code)  // the largest value's code, from 448 down
        for (const float guess : {amax / e4m3_value(code), std::nextafter(amax / e4m3_value(code), 0.0f),
                                  std::nextafter(amax / e4m3_value(code), INFINITY)})
          if (!found && reproduces(values, k, r0, r1, c0, c1, guess, codes)) found = true, scale = guess;
      if (!found) {  // not FP8 values of this form: quantised as quantize_fp8_scaled (its codes again)
        scale = fp8_tile_scale(amax);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c)
            codes[r * k + c] = static_cast<uint8_t>(e4m3_code(std::clamp(values[r * k + c] / scale, -448.0f, 448.0f)));
      }
    }
}

}  // namespace deepinfer::cpu
