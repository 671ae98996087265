// DeepSeek V2 and V3 (model_type deepseek_v2 / deepseek_v3) in the architecture registry (architectures.cpp): their
// config.json keys (MLA, DeepSeekMoE, the router of each version, RoPE with YaRN, FP8 quantization_config), the
// checkpoint's tensors in transformers' names (the MTP layer as an optional part), a routed expert's tensors, and the
// config cut to its first layers (--num-layers).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/model/architectures.h"
#include "src/model/model_config.h"

namespace deepinfer {

void parse_deepseek_v2(const ConfigReader& r, ModelConfig& c);
void parse_deepseek_v3(const ConfigReader& r, ModelConfig& c);
std::vector<TensorSpec> deepseek_tensor_specs(const ModelConfig& c);
// "model.layers.N.mlp.experts.E.": (N, E).
std::optional<std::pair<int64_t, int64_t>> deepseek_routed_expert(const std::string& name);
// The first `num_layers` layers (a checkpoint's later layers are not read).
nlohmann::json deepseek_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source, bool dummy_weights);

}  // namespace deepinfer
