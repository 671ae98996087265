#include "src/model/v41_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace deepinfer::v41 {

float round_e4m3(float x) {
  const float magnitude = std::fabs(x);
  if (magnitude == 0.0f || std::isnan(x)) return x;
  // Spacing of the e4m3 grid at this magnitude: 2^(e - 3), with e at least -6 (subnormals below 2^-6).
  const int exponent = std::max(std::ilogb(magnitude), -6);
  const float step = std::ldexp(1.0f, exponent - 3);
  const float rounded = std::nearbyint(magnitude / step) * step;  // exact division; ties to even
  return std::copysign(std::min(rounded, 448.0f), x);
}

float pow2_ceil(float t) {
  const auto bits = std::bit_cast<uint32_t>(t);
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return std::ldexp(1.0f, exponent);
}

float round_e2m1(float x) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  static constexpr float kBoundaries[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  // Ties at a boundary go to the even code: up where the code above is even, down otherwise.
  static constexpr bool kTiesUp[7] = {false, true, false, true, false, true, false};
  const float magnitude = std::fabs(x);
  int code = 0;
  for (int i = 0; i < 7; ++i) {
    const float threshold = kTiesUp[i] ? kBoundaries[i] : std::nextafter(kBoundaries[i], INFINITY);
    code += magnitude >= threshold ? 1 : 0;
  }
  return std::signbit(x) ? -kValues[code] : kValues[code];
}

void fake_quant_fp8(float* x, int64_t n, int64_t block) {
  if (n % block != 0) return;
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = pow2_ceil(std::max(amax, 1e-4f) * static_cast<float>(1.0 / 448.0));
    for (int64_t i = b; i < b + block; ++i) x[i] = round_e4m3(std::clamp(x[i] / scale, -448.0f, 448.0f)) * scale;
  }
}

void fake_quant_fp4(float* x, int64_t n, int64_t block, bool e4m3_scales) {
  if (n % block != 0) return;
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = e4m3_scales
                            ? round_e4m3(std::max(amax, 6.0f * std::ldexp(1.0f, -9)) / 6.0f)
                            : pow2_ceil(std::max(amax, 6.0f * std::ldexp(1.0f, -126)) * static_cast<float>(1.0 / 6.0));
    for (int64_t i = b; i < b + block; ++i) x[i] = round_e2m1(std::clamp(x[i] / scale, -6.0f, 6.0f)) * scale;
  }
}

}  // namespace deepinfer::v41
