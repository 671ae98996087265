// Rotary position tables: the inverse frequencies of plain RoPE or YaRN and the attention factor that
// scales cos/sin, computed as transformers' _compute_yarn_parameters does.
#pragma once

#include <cstdint>
#include <vector>

#include "src/model/model_config.h"

namespace deepinfer {

class RotaryTable {
 public:
  explicit RotaryTable(const ModelConfig& config);

  int64_t half_dim() const { return static_cast<int64_t>(inv_freq_.size()); }
  float attention_factor() const { return attention_factor_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // cos/sin [n, half_dim] for the given positions.
  void fill(const int32_t* positions, int64_t n, float* cos, float* sin) const;

 private:
  std::vector<float> inv_freq_;
  float attention_factor_ = 1.0f;
};

}  // namespace deepinfer
