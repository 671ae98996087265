#include "src/app/model_loading.h"

#include <spdlog/spdlog.h>

#include "src/core/check.h"

namespace deepinfer::app {

LoadedModel load_model(const ModelOptions& options, const WeightStore::TensorFilter& wanted) {
  const std::filesystem::path path(options.model_path);
  DI_INPUT_CHECK(std::filesystem::exists(path), "--model '{}' does not exist", path.string());
  LoadedModel loaded;
  loaded.device = parse_device(options.device);
  loaded.config = load_model_config(path);
  if (options.no_engram && !loaded.config.v41.engram_layer_ids.empty()) {
    spdlog::warn("--no-engram: running DeepSeek-V4.1 without its {} engram layers", loaded.config.v41.engram_layer_ids.size());
    loaded.config.v41.engram_layer_ids.clear();
  }
  DI_INPUT_CHECK(loaded.config.v41.engram_layer_ids.empty(),
                 "DeepSeek-V4.1 engram layers ({} of them) are not implemented: pass --no-engram to run without them",
                 loaded.config.v41.engram_layer_ids.size());
  LoadFormat format = parse_load_format(options.load_format);
  if (format == LoadFormat::kAuto) format = std::filesystem::is_directory(path) ? LoadFormat::kSafetensors : LoadFormat::kDummy;
  if (format == LoadFormat::kDummy && loaded.device == Device::kCuda) {
    // Generated on the GPU once the topology has picked it: no host copy of the weights.
    loaded.weights.dummy_seed = options.seed;
    loaded.weights.wanted = wanted;
    return loaded;
  }
  loaded.weights.host =
      std::make_unique<WeightStore>(WeightStore::load(loaded.config, path, format, options.seed, wanted));
  return loaded;
}

std::unique_ptr<CausalLm> build_model(LoadedModel&& loaded, int gpu) {
  spdlog::info("backend: {}{}", device_name(loaded.device),
               loaded.device == Device::kCuda ? fmt::format(" (GPU {})", gpu) : std::string());
  return make_causal_lm(std::move(loaded.config), std::move(loaded.weights), loaded.device, gpu);
}

void require_single_rank(const World& world, const char* command) {
  const int size = world.size();
  DI_INPUT_CHECK(size == 1, "'{}' runs on one rank for now (got {}); launch it with mpirun -np 1 or without mpirun",
                 command, size);
}

}  // namespace deepinfer::app
