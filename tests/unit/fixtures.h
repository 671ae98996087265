// The transformers-written checkpoints under tests/fixtures/ and their reference outputs.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace deepinfer::testing {

inline std::filesystem::path fixture_dir(const std::string& name) {
  return std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests" / "fixtures" / name;
}

// configs/models/NAME's config.json, for a test to change before parse_model_config.
inline nlohmann::json model_config_json(const std::string& name) {
  std::ifstream in(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs" / "models" / name);
  return nlohmann::json::parse(in);
}

// configs/models/tiny.json with DeepSeek's MLA head (latent 512, rope 64, nope 128, v 128): the widths the tensor-core
// attention kernels take.
inline nlohmann::json deepseek_mla_head_json() {
  nlohmann::json j = model_config_json("tiny.json");
  j["kv_lora_rank"] = 512;
  j["qk_rope_head_dim"] = 64;
  j["qk_nope_head_dim"] = 128;
  j["v_head_dim"] = 128;
  return j;
}

// That, widened so that its projections are whole 128 x 128 tiles (q_b 768 x 256, o_proj 256 x 512, the MLPs and
// experts), with DeepSeek-V3's FP8 quantization_config: the shapes V3's FP8 GEMM takes.
inline nlohmann::json v3_fp8_tiles_json() {
  nlohmann::json j = deepseek_mla_head_json();
  j["hidden_size"] = 256;
  j["intermediate_size"] = 512;
  j["moe_intermediate_size"] = 128;
  j["q_lora_rank"] = 256;
  j["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                              {"weight_block_size", {128, 128}}};
  return j;
}

inline const std::vector<std::string>& all_fixtures() {
  static const std::vector<std::string> kNames = {"tiny-v3-fp32", "tiny-v3-bf16", "tiny-v2-fp32", "tiny-v2-bf16"};
  return kNames;
}

// The largest relative L2 error of a row of `row` values, a against the reference b (same size).
inline double worst_relative_error(const std::vector<float>& a, const std::vector<float>& b, int64_t row) {
  double worst = 0.0;
  for (size_t r = 0; r < a.size() / row; ++r) {
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < row; ++i) {
      const double d = static_cast<double>(a[r * row + i]) - b[r * row + i];
      diff += d * d;
      ref += static_cast<double>(b[r * row + i]) * b[r * row + i];
    }
    worst = std::max(worst, std::sqrt(diff / ref));
  }
  return worst;
}

inline nlohmann::json fixture_reference(const std::string& name) {
  std::ifstream in(fixture_dir(name) / "reference.json");
  return nlohmann::json::parse(in);
}

}  // namespace deepinfer::testing
