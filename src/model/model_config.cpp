#include "src/model/model_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/json_depth.h"
#include "src/model/architectures.h"
#include "src/model/engram_hash.h"

namespace deepinfer {

namespace {

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

float ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope.yarn && rope.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  return static_cast<float>(scale);
}

bool ModelConfig::is_moe_layer(int64_t layer_idx) const {
  return n_routed_experts > 0 && layer_idx >= first_k_dense_replace;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  nlohmann::json json;
  check_json_file_depth(json_text, source);
  try {
    json = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
  DI_INPUT_CHECK(json.is_object(), "{}: a model config must be a JSON object", source);
  DI_INPUT_CHECK(json.contains("model_type") && json["model_type"].is_string(), "{}: missing key 'model_type'",
                 source);
  const std::string model_type = json["model_type"].get<std::string>();
  const Architecture* arch = find_architecture(model_type);
  if (arch == nullptr) {
    std::string known;
    for (const std::string& name : known_model_types()) known += (known.empty() ? "" : ", ") + name;
    throw InputError(fmt::format("{}: unknown model_type '{}' (known: {})", source, model_type, known));
  }
  ModelConfig config;
  config.model_type = model_type;
  arch->parse_config(ConfigReader(json, source), config);
  return config;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  const bool directory = std::filesystem::is_directory(path);
  const auto file = directory ? path / "config.json" : path;
  ModelConfig config = parse_model_config(read_text_file(file, "model config"), file.string());
  // DeepSeek-V4.1's engram hashing tables live beside the config (launch/engram_hash.py writes them); a model
  // built with engram layers but without them refuses to run (--no-engram drops the layers).
  if (directory && !config.v41.engram_layer_ids.empty() && std::filesystem::exists(path / "engram_hash.json"))
    read_engram_hash(path / "engram_hash.json", config.v41);
  return config;
}

}  // namespace deepinfer
