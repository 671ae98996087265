#include "src/model/architectures.h"

#include "src/model/deepseek/deepseek_config.h"
#include "src/model/v41/v41_config.h"

#include <cstdio>
#include <limits>
#include <map>

#include "src/core/check.h"

namespace deepinfer {

void ConfigReader::fail(const std::string& key, const std::string& what) const {
  throw InputError(fmt::format("{}: key '{}' {}", source_, key, what));
}

int64_t ConfigReader::get_int(const std::string& key, int64_t min, int64_t max) const {
  if (!has(key)) fail(key, "is missing");
  const auto& value = json_.at(key);
  if (!value.is_number_integer()) fail(key, fmt::format("must be an integer, got {}", value.dump()));
  const int64_t v = value.get<int64_t>();
  if (v < min || v > max) fail(key, fmt::format("= {} is out of range [{}, {}]", v, min, max));
  return v;
}

int64_t ConfigReader::get_int(const std::string& key, int64_t min, int64_t max, int64_t fallback) const {
  return has(key) ? get_int(key, min, max) : fallback;
}

double ConfigReader::get_double(const std::string& key, double min, double max, double fallback) const {
  if (!has(key)) return fallback;
  const auto& value = json_.at(key);
  if (!value.is_number()) fail(key, fmt::format("must be a number, got {}", value.dump()));
  const double v = value.get<double>();
  if (!(v >= min && v <= max)) fail(key, fmt::format("= {} is out of range [{}, {}]", v, min, max));
  return v;
}

bool ConfigReader::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!json_.at(key).is_boolean()) fail(key, "must be true or false");
  return json_.at(key).get<bool>();
}

std::string ConfigReader::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!json_.at(key).is_string()) fail(key, "must be a string");
  return json_.at(key).get<std::string>();
}

std::vector<int64_t> ConfigReader::get_int_list(const std::string& key, int64_t min, int64_t max) const {
  if (!has(key)) return {};
  const nlohmann::json& list = json_.at(key);
  if (!list.is_array()) fail(key, "must be a list of integers");
  std::vector<int64_t> values;
  for (const nlohmann::json& item : list) {
    if (!item.is_number_integer()) fail(key, fmt::format("must hold integers, got {}", item.dump()));
    const auto v = item.get<int64_t>();
    if (v < min || v > max) fail(key, fmt::format("holds {}, out of range [{}, {}]", v, min, max));
    values.push_back(v);
  }
  return values;
}

std::optional<std::pair<int64_t, int64_t>> routed_expert_in(const std::string& name, const char* pattern) {
  int layer = -1, expert = -1;
  if (std::sscanf(name.c_str(), pattern, &layer, &expert) != 2) return std::nullopt;
  return std::pair<int64_t, int64_t>{layer, expert};
}

namespace {

std::optional<std::pair<int64_t, int64_t>> v41_routed_expert(const std::string& name) {
  return routed_expert_in(name, "layers.%d.ffn.experts.%d.");
}

// V4.1: v41_at_depth keeps a layer of every kind and renumbers them, so only generated weights fit the cut.
nlohmann::json v41_config_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source, bool dummy) {
  DI_INPUT_CHECK(dummy, "--num-layers renumbers DeepSeek-V4.1's layers: use it with --load-format dummy");
  return v41_at_depth(std::move(root), num_layers, source);
}

const std::map<std::string, Architecture>& registry() {
  static const std::map<std::string, Architecture> kRegistry = {
      {"deepseek_v2",
       {"deepseek_v2", parse_deepseek_v2, deepseek_tensor_specs, nullptr, deepseek_routed_expert, build_deepseek_model,
        deepseek_at_depth, text::ChatFormat::kV4}},
      {"deepseek_v3",
       {"deepseek_v3", parse_deepseek_v3, deepseek_tensor_specs, nullptr, deepseek_routed_expert, build_deepseek_model,
        deepseek_at_depth, text::ChatFormat::kV4}},
      {"deepseek_v41",
       {"deepseek_v41", parse_deepseek_v41, v41_tensor_specs,
        [](const std::string& name) { return name.starts_with("mtp."); }, v41_routed_expert,
        build_deepseek_v41_model, v41_config_at_depth, text::ChatFormat::kV41}},
  };
  return kRegistry;
}

}  // namespace

const Architecture* find_architecture(const std::string& model_type) {
  auto it = registry().find(model_type);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> known_model_types() {
  std::vector<std::string> names;
  for (const auto& [name, arch] : registry()) names.push_back(name);
  return names;
}

nlohmann::json config_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source, bool dummy_weights) {
  const Architecture* arch = find_architecture(root.value("model_type", ""));
  DI_INPUT_CHECK(arch != nullptr, "{}: unknown model_type '{}'", source, root.value("model_type", ""));
  return arch->at_depth(std::move(root), num_layers, source, dummy_weights);
}

std::string draft_module_tensor(const ModelConfig& config, bool dspark) {
  return dspark ? std::string("mtp.0.main_proj.weight")
                : fmt::format("model.layers.{}.eh_proj.weight", config.num_hidden_layers);
}

text::ChatFormat chat_format_of(const ModelConfig& config) {
  const Architecture* arch = find_architecture(config.model_type);
  DI_CHECK(arch != nullptr, "no architecture '{}'", config.model_type);
  return arch->chat_format;
}

}  // namespace deepinfer
