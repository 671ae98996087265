// The one registry of model architectures, keyed by config.json's model_type. An architecture knows how to
// read its config keys, which tensors its checkpoint holds and how its model is built on each backend; nothing
// else in the engine switches on it.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/backend.h"
#include "src/model/model_config.h"
#include "src/text/chat_template.h"

namespace deepinfer {

// Reads config.json keys with range checks; every message names the source and the key.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& json, std::string source) : json_(json), source_(std::move(source)) {}
  bool has(const std::string& key) const { return json_.contains(key) && !json_.at(key).is_null(); }
  int64_t get_int(const std::string& key, int64_t min, int64_t max) const;
  int64_t get_int(const std::string& key, int64_t min, int64_t max, int64_t fallback) const;
  double get_double(const std::string& key, double min, double max, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // Empty when absent.
  std::vector<int64_t> get_int_list(const std::string& key, int64_t min, int64_t max) const;
  const nlohmann::json& json() const { return json_; }
  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& json_;
  std::string source_;
};

struct TensorSpec {
  TensorSpec(std::string name_, Shape shape_, std::string optional_part_ = {})
      : name(std::move(name_)), shape(std::move(shape_)), optional_part(std::move(optional_part_)) {}
  std::string name;
  Shape shape;
  // Non-empty: a tensor of an optional part of the model, loaded when the checkpoint has that part and
  // skipped as a whole when it has none of it (transformers saves DeepSeek-V3 without its MTP layer).
  std::string optional_part;
};

struct Architecture {
  std::string model_type;
  std::function<void(const ConfigReader&, ModelConfig&)> parse_config;
  std::function<std::vector<TensorSpec>(const ModelConfig&)> tensor_specs;
  // Checkpoint tensors beyond tensor_specs that are loaded under their own names (DeepSeek-V4.1's DSpark draft
  // layers, `mtp.N.*`, kept for speculative decoding); null when there are none.
  std::function<bool(const std::string& name)> keeps_extra_tensor;
  // The (layer, expert) of a routed expert's tensor, by the checkpoint's naming; nullopt for every other tensor.
  std::function<std::optional<std::pair<int64_t, int64_t>>(const std::string& name)> routed_expert_of;
  // The model on the chosen backend (an InputError where that backend does not run this architecture).
  std::function<std::unique_ptr<CausalLm>(ModelConfig, WeightOrigin, Device, int gpu)> build;
  // config.json's object cut to its first `num_layers` decoder layers (--num-layers); `dummy_weights` says whether
  // the weights are generated (a cut that renumbers layers cannot read a checkpoint's).
  std::function<nlohmann::json(nlohmann::json root, int64_t num_layers, const std::string& source, bool dummy_weights)>
      at_depth;
  // The chat template of the family (the prompt of chat requests).
  text::ChatFormat chat_format = text::ChatFormat::kV4;
};

// The (layer, expert) of a tensor named by `pattern`, a scanf format with the layer's and the expert's %d (e.g.
// "layers.%d.ffn.experts.%d."); nullopt where the name does not match.
std::optional<std::pair<int64_t, int64_t>> routed_expert_in(const std::string& name, const char* pattern);

// nullptr for an unknown model_type.
const Architecture* find_architecture(const std::string& model_type);
std::vector<std::string> known_model_types();

// config.json's object (`root`, read from `source`) at --num-layers, by its model_type's architecture. InputError for
// an unknown model_type, a depth the model does not have, or a cut the weights cannot follow.
nlohmann::json config_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source, bool dummy_weights);

// The tensor by which a checkpoint shows it carries a draft module (the models test for it): DeepSeek-V4.1's DSpark
// layers' (`dspark`) or V3's MTP layer's.
std::string draft_module_tensor(const ModelConfig& config, bool dspark);

// The chat template of the model's family.
text::ChatFormat chat_format_of(const ModelConfig& config);

}  // namespace deepinfer
