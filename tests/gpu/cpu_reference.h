// The CPU reference of a GPU model test on the weights the GPU holds: a fixture's values rounded to bf16, as the CUDA
// models store them. The tiny random fixtures amplify a rounding of their weights into errors of order 1 in a few
// rows (where a routing or a top-k pick flips): CPU against CPU, bf16-rounded weights moved tiny-v3-fp32's MTP logits
// by 0.70 in their worst row and tiny-v41-dspark's window keys by up to 1.2 (medians 0.01-0.28 by depth;
// results/h200/speculation).
// So these tests compare against rounded weights and judge by the median row, the worst rows printed.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/model/architectures.h"
#include "src/model/backend.h"
#include "tests/unit/fixtures.h"

namespace deepinfer::testing {

// Rounds every value of the store's tensors to the nearest bf16 (ties to even), in place.
inline void round_to_bf16(WeightStore& store, const ModelConfig& config) {
  for (const TensorSpec& spec : find_architecture(config.model_type)->tensor_specs(config)) {
    if (store.data_or_null(spec.name) == nullptr) continue;
    Tensor t = store.take(spec.name);
    float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint32_t bits = std::bit_cast<uint32_t>(v[i]);
      bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
      v[i] = std::bit_cast<float>(bits);
    }
    store.set(spec.name, std::move(t));
  }
}

// A fixture's model on `device`; with `rounded`, its weights rounded to bf16 first.
inline std::unique_ptr<CausalLm> load_fixture(const std::string& fixture, Device device, bool rounded,
                                              bool batch_invariant = false) {
  const auto dir = fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  config.batch_invariant = batch_invariant;
  WeightOrigin weights;
  weights.host = std::make_unique<WeightStore>(WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  if (rounded) round_to_bf16(*weights.host, config);
  return make_causal_lm(std::move(config), std::move(weights), device, 0);
}

// The same with its draft module enabled.
inline std::unique_ptr<CausalLm> load_with_drafter(const std::string& fixture, Device device, bool rounded,
                                                   bool batch_invariant = false) {
  std::unique_ptr<CausalLm> model = load_fixture(fixture, device, rounded, batch_invariant);
  require_draft_module(*model).enable();
  return model;
}

// The median over rows of `row` values of the relative L2 error of a against the reference b.
inline double median_relative_error(const std::vector<float>& a, const std::vector<float>& b, int64_t row) {
  std::vector<double> errors;
  for (size_t r = 0; r < a.size() / row; ++r) {
    const std::vector<float> x(a.begin() + r * row, a.begin() + (r + 1) * row), y(b.begin() + r * row, b.begin() + (r + 1) * row);
    errors.push_back(worst_relative_error(x, y, row));
  }
  if (errors.empty()) return 0.0;
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
  return errors[errors.size() / 2];
}

}  // namespace deepinfer::testing
