#include "src/app/model_loading.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/json_depth.h"
#include "src/model/architectures.h"
#include "src/model/engram_hash.h"
#include "src/model/v41/v41_config.h"

namespace deepinfer::app {

namespace {

// The model's configuration at --num-layers, cut as its architecture cuts it (architectures.h, config_at_depth: V2/V3
// their first layers, V4.1 a layer of every kind renumbered, so only with dummy weights).
ModelConfig config_at_depth(const std::filesystem::path& path, int64_t num_layers, bool dummy) {
  const auto file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  const std::string text = read_text_file(file, "model config");
  check_json_file_depth(text, file.string());
  nlohmann::json root = nlohmann::json::parse(text, nullptr, false);
  DI_INPUT_CHECK(root.is_object(), "{}: not a JSON object", file.string());
  const std::string source = fmt::format("{} at --num-layers {}", file.string(), num_layers);
  return parse_model_config(deepinfer::config_at_depth(std::move(root), num_layers, file.string(), dummy).dump(),
                            source);
}

}  // namespace

LoadedModel load_model(const ModelOptions& options, const WeightStore::TensorFilter& wanted, RowShard engram_shard) {
  const std::filesystem::path path(options.model_path);
  DI_INPUT_CHECK(std::filesystem::exists(path), "--model '{}' does not exist", path.string());
  LoadedModel loaded;
  loaded.device = parse_device(options.device);
  loaded.cuda_graphs = !options.no_cuda_graphs;
  LoadFormat format = parse_load_format(options.load_format);
  if (format == LoadFormat::kAuto) format = std::filesystem::is_directory(path) ? LoadFormat::kSafetensors : LoadFormat::kDummy;
  loaded.config = options.num_layers > 0 ? config_at_depth(path, options.num_layers, format == LoadFormat::kDummy)
                                         : load_model_config(path);
  if (options.no_engram && !loaded.config.v41.engram_layer_ids.empty()) {
    spdlog::warn("--no-engram: running DeepSeek-V4.1 without its {} engram layers", loaded.config.v41.engram_layer_ids.size());
    loaded.config.v41.engram_layer_ids.clear();
  }
  loaded.config.batch_invariant = options.batch_invariant;
  V41TextConfig& v41 = loaded.config.v41;
  v41.engram_tables_on_host = options.engram_tables == "host";
  if (!v41.engram_layer_ids.empty()) v41.engram_shard = engram_shard;
  if (!v41.engram_layer_ids.empty() && v41.engram_hash.compressed_ids.empty()) {
    // The hashing's tables: load_model_config read them where the model directory has them.
    if (format == LoadFormat::kDummy) dummy_engram_hash(v41);
    else read_engram_hash(std::filesystem::is_directory(path) ? path / "engram_hash.json"
                                                              : path.parent_path() / "engram_hash.json", v41);
  }
  if (format == LoadFormat::kDummy && loaded.device == Device::kCuda) {
    // Generated on the GPU once the topology has picked it: no host copy of the weights.
    loaded.weights.dummy_seed = options.seed;
    loaded.weights.wanted = wanted;
    return loaded;
  }
  if (format != LoadFormat::kDummy && loaded.device == Device::kCuda) {
    // Checked whole now, read a tensor at a time as the GPU takes them: the host never holds the rank's weights.
    loaded.weights.checkpoint = std::make_unique<CheckpointTensors>(loaded.config, path, wanted);
    return loaded;
  }
  loaded.weights.host =
      std::make_unique<WeightStore>(WeightStore::load(loaded.config, path, format, options.seed, wanted));
  return loaded;
}

std::unique_ptr<CausalLm> build_model(LoadedModel&& loaded, int gpu) {
  spdlog::info("backend: {}{}", device_name(loaded.device),
               loaded.device == Device::kCuda ? fmt::format(" (GPU {})", gpu) : std::string());
  std::unique_ptr<CausalLm> model =
      make_causal_lm(std::move(loaded.config), std::move(loaded.weights), loaded.device, gpu);
  if (DeviceSteps* device = model->device_steps()) device->set_cuda_graphs(loaded.cuda_graphs);
  return model;
}

void require_single_rank(const World& world, const char* command) {
  const int size = world.size();
  DI_INPUT_CHECK(size == 1, "'{}' runs on one rank for now (got {}); launch it with mpirun -np 1 or without mpirun",
                 command, size);
}

}  // namespace deepinfer::app
