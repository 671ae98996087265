#include "src/model/weights.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cmath>

#include "src/core/random.h"
#include "src/model/architectures.h"
#include "src/model/checkpoint_tensors.h"

namespace deepinfer {

LoadFormat parse_load_format(const std::string& text) {
  if (text == "auto") return LoadFormat::kAuto;
  if (text == "safetensors") return LoadFormat::kSafetensors;
  if (text == "dummy") return LoadFormat::kDummy;
  throw InputError(fmt::format("unknown --load-format '{}' (auto, safetensors, dummy)", text));
}

DummyRule dummy_rule(const std::string& name, const Shape& shape, uint64_t seed) {
  DummyRule rule{splitmix64(seed) ^ fnv1a64(name), 1.0f, 0.0f};
  if (shape.size() >= 2) rule.scale = 1.0f / std::sqrt(static_cast<float>(shape.back()));
  else if (name.ends_with("bias")) rule.scale = 0.1f;
  else rule.offset = 1.0f, rule.scale = 0.2f;
  return rule;
}

Tensor make_dummy_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  return make_dummy_rows(name, shape, 0, shape.empty() ? 1 : shape[0], seed);
}

Tensor make_dummy_rows(const std::string& name, const Shape& shape, int64_t first_row, int64_t num_rows,
                       uint64_t seed) {
  Shape rows_shape = shape;
  if (!rows_shape.empty()) rows_shape[0] = num_rows;
  Tensor tensor = Tensor::zeros(rows_shape);
  float* data = tensor.data<float>();
  const DummyRule rule = dummy_rule(name, shape, seed);
  const int64_t n = tensor.numel(), first = num_rows > 0 ? first_row * (n / num_rows) : 0;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    data[i] = rule.offset + rule.scale * normal_at(rule.key, static_cast<uint64_t>(first + i));
  return tensor;
}

void require_checkpoint_dir(const std::filesystem::path& model_path) {
  DI_INPUT_CHECK(std::filesystem::is_directory(model_path), "--model '{}' is a config file, not a checkpoint directory: "
                 "add --load-format dummy for random weights", model_path.string());
}

bool is_engram_table(const std::string& name) { return name.ends_with(".engram.embed.weight"); }

WeightStore WeightStore::load(const ModelConfig& config, const std::filesystem::path& model_path, LoadFormat format,
                              uint64_t seed, const TensorFilter& wanted) {
  const Architecture* arch = find_architecture(config.model_type);
  DI_CHECK(arch != nullptr, "no architecture '{}'", config.model_type);
  std::vector<TensorSpec> specs = arch->tensor_specs(config);
  if (wanted) std::erase_if(specs, [&](const TensorSpec& spec) { return !wanted(spec.name); });
  if (format == LoadFormat::kAuto)
    format = std::filesystem::is_directory(model_path) ? LoadFormat::kSafetensors : LoadFormat::kDummy;
  if (format != LoadFormat::kDummy) require_checkpoint_dir(model_path);

  // Engram tables split across the EP group's ranks: this rank's rows only (model/row_shard.h).
  const RowShard& shard = config.v41.engram_shard;
  auto held_rows = [&](const std::string& name, const Shape& shape) -> std::pair<int64_t, int64_t> {
    if (shard.whole() || !is_engram_table(name)) return {0, shape.empty() ? 1 : shape[0]};
    return {shard.first(shape[0]), shard.count(shape[0])};
  };
  // fp32 on the host: refuse what cannot fit rather than be killed half-way through (the largest tensor named, so
  // that the config's sizes to lower are seen).
  double bytes = 0.0, largest_bytes = 0.0;
  const TensorSpec* largest = nullptr;
  for (const TensorSpec& spec : specs) {
    const double tensor_bytes = 4.0 * static_cast<double>(shape_numel(spec.shape)) *
                                held_rows(spec.name, spec.shape).second /
                                std::max<int64_t>(spec.shape.empty() ? 1 : spec.shape[0], 1);
    bytes += tensor_bytes;
    if (tensor_bytes > largest_bytes) largest_bytes = tensor_bytes, largest = &spec;
  }
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  DI_INPUT_CHECK(bytes < 0.9 * memory,
                 "--model '{}': {:.1f} GiB of fp32 weights do not fit this host's {:.1f} GiB of memory (the CPU "
                 "reference keeps every weight in fp32; the largest tensor, {} {}, takes {:.1f} GiB): lower the "
                 "config's sizes or use a larger host", model_path.string(), bytes / (1 << 30), memory / (1 << 30),
                 largest ? largest->name : "", largest ? shape_str(largest->shape) : "", largest_bytes / (1 << 30));

  WeightStore store;
  if (format == LoadFormat::kDummy) {
    for (const TensorSpec& spec : specs) {
      const auto [first, count] = held_rows(spec.name, spec.shape);
      store.tensors_.emplace(spec.name, make_dummy_rows(spec.name, spec.shape, first, count, seed));
    }
    spdlog::info("dummy weights: {} tensors, {:.2f} M parameters, seed {}", store.num_tensors(),
                 store.num_parameters() / 1e6, seed);
    return store;
  }
  const CheckpointTensors checkpoint(config, model_path, wanted);
  for (const std::string& name : checkpoint.names()) {
    store.tensors_.emplace(name, checkpoint.read(name));
    if (checkpoint.stored_fp8(name)) store.stored_fp8_.insert(name);
  }
  spdlog::info("loaded {} tensors ({:.2f} M parameters) from {}", store.num_tensors(), store.num_parameters() / 1e6,
               model_path.string());
  return store;
}

const Tensor& WeightStore::get(const std::string& name) const {
  auto it = tensors_.find(name);
  DI_CHECK(it != tensors_.end(), "weight '{}' was not loaded", name);
  return it->second;
}

Tensor WeightStore::take(const std::string& name) {
  auto it = tensors_.find(name);
  DI_CHECK(it != tensors_.end(), "weight '{}' was not loaded", name);
  Tensor t = std::move(it->second);
  tensors_.erase(it);
  return t;
}

const float* WeightStore::data_or_null(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.data<float>();
}

int64_t WeightStore::num_parameters() const {
  int64_t total = 0;
  for (const auto& [name, tensor] : tensors_) total += tensor.numel();
  return total;
}

}  // namespace deepinfer
