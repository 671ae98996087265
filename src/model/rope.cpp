#include "src/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace deepinfer {

namespace {

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double correction_dim(double num_rotations, double dim, double base, double max_positions) {
  return dim * std::log(max_positions / (num_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RotaryTable::RotaryTable(const ModelConfig& config) {
  const RopeConfig& rope = config.rope;
  const int64_t dim = config.qk_rope_head_dim;
  const int64_t half = dim / 2;
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    // As torch: base ** (arange(0, dim, 2).float() / dim), in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq_[i] = 1.0f / std::pow(static_cast<float>(rope.theta), exponent);
  }
  if (!rope.yarn) return;

  double low = correction_dim(rope.beta_fast, dim, rope.theta, rope.original_max_position_embeddings);
  double high = correction_dim(rope.beta_slow, dim, rope.theta, rope.original_max_position_embeddings);
  if (rope.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int64_t i = 0; i < half; ++i) {
    const float extrapolation = inv_freq_[i];
    const float interpolation = extrapolation / static_cast<float>(rope.factor);
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_weight = 1.0f - ramp;
    inv_freq_[i] = interpolation * (1.0f - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  if (rope.attention_factor > 0.0) attention_factor_ = static_cast<float>(rope.attention_factor);
  else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0)
    attention_factor_ = static_cast<float>(yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim));
  else attention_factor_ = static_cast<float>(yarn_mscale(rope.factor, 1.0));
}

void RotaryTable::fill(const int32_t* positions, int64_t n, float* cos, float* sin) const {
  const int64_t half = half_dim();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq_[i];
      cos[t * half + i] = std::cos(angle) * attention_factor_;
      sin[t * half + i] = std::sin(angle) * attention_factor_;
    }
  }
}

}  // namespace deepinfer
