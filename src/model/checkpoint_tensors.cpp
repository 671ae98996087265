#include "src/model/checkpoint_tensors.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "src/core/check.h"
#include "src/model/architectures.h"
#include "src/model/quantization.h"
#include "src/model/weights.h"

namespace deepinfer {

namespace {

const std::filesystem::path& checkpoint_dir(const std::filesystem::path& model_path) {
  require_checkpoint_dir(model_path);
  return model_path;
}

}  // namespace

CheckpointTensors::CheckpointTensors(const ModelConfig& config, const std::filesystem::path& model_path,
                                     const TensorFilter& wanted)
    : checkpoint_(checkpoint_dir(model_path)), quantization_(config.quantization), engram_shard_(config.v41.engram_shard) {
  const Architecture* arch = find_architecture(config.model_type);
  DI_CHECK(arch != nullptr, "no architecture '{}'", config.model_type);
  std::vector<TensorSpec> specs = arch->tensor_specs(config);
  if (wanted) std::erase_if(specs, [&](const TensorSpec& spec) { return !wanted(spec.name); });
  // An optional part is loaded whole or not at all: absent entirely, it is skipped (and said so); half there,
  // the checkpoint is damaged.
  std::map<std::string, std::pair<int64_t, const TensorSpec*>> parts;  // part -> (tensors present, one missing)
  for (const TensorSpec& spec : specs) {
    if (spec.optional_part.empty()) continue;
    auto& [present, missing] = parts[spec.optional_part];
    if (checkpoint_.find(spec.name) != nullptr) ++present;
    else if (missing == nullptr) missing = &spec;
  }
  for (const auto& [part, counts] : parts) {
    const auto& [present, missing] = counts;
    if (present == 0)
      spdlog::info("{}: the checkpoint has no tensors of {}: loading the model without them (speculative decoding "
                   "with them is unavailable)", model_path.string(), part);
    else if (missing != nullptr)
      check(missing->name, &missing->shape);  // the missing tensor's error names it and its shape
  }
  for (const TensorSpec& spec : specs)
    if (spec.optional_part.empty() || parts.at(spec.optional_part).first > 0) check(spec.name, &spec.shape);
  // Tensors the architecture keeps beyond its specs (DeepSeek-V4.1's DSpark draft layers) under their checkpoint
  // names, whatever their modules (not built yet) will be; their scales travel with them.
  if (arch->keeps_extra_tensor) {
    for (const std::string& name : checkpoint_.names()) {
      if (!arch->keeps_extra_tensor(name) || name.ends_with(".scale") || name.ends_with("_scale_inv") ||
          plans_.contains(name))  // already read as a spec (the DSpark layers of a config that names them)
        continue;
      if (!wanted || wanted(name)) check(name, nullptr);
    }
  }
}

// Quantised tensors carry their scales beside them: `<name>_scale_inv` (DeepSeek-V3) or `<module>.scale`
// (DeepSeek-V4.x, the module being the name without `.weight`).
std::string CheckpointTensors::scale_name(const std::string& name) const {
  const std::string module = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
  for (const std::string& candidate : {name + "_scale_inv", module + ".scale"})
    if (checkpoint_.find(candidate) != nullptr) return candidate;
  return "";
}

void CheckpointTensors::check(const std::string& name, const Shape* expected) {
  const std::string where = checkpoint_.dir().string();
  const SafetensorsFile::Entry* entry = checkpoint_.find(name);
  DI_INPUT_CHECK(entry != nullptr, "{}: missing tensor '{}' (expected shape {})", where, name,
                 expected ? shape_str(*expected) : "?");
  const std::string scale = scale_name(name);
  const bool fp4 = quantization_.fp4_experts && entry->dtype == DType::kU8 && entry->shape.size() == 2 &&
                   (expected ? *expected == Shape{entry->shape[0], 2 * entry->shape[1]} : !scale.empty());
  DI_INPUT_CHECK(fp4 || !expected || entry->shape == *expected, "{}: tensor '{}' has shape {}, expected {}",
                 checkpoint_.file_of(name), name, shape_str(entry->shape), shape_str(*expected));
  const bool floating = entry->dtype == DType::kF32 || entry->dtype == DType::kBF16 || entry->dtype == DType::kF16 ||
                        entry->dtype == DType::kF8E4M3;
  DI_INPUT_CHECK(fp4 || floating, "{}: tensor '{}' is stored as {}; the model needs floating point (F32, BF16, "
                 "F16, or F8_E4M3 / packed FP4 with their scales)", checkpoint_.file_of(name), name,
                 dtype_name(entry->dtype));
  Plan plan;
  const bool fp8 = entry->dtype == DType::kF8E4M3 && quantization_.fp8;
  if (expected != nullptr && !engram_shard_.whole() && is_engram_table(name)) {  // this rank's part of the table
    DI_INPUT_CHECK(!fp4, "{}: '{}' is packed FP4; engram tables split across ranks are read as FP8, bf16 or fp32",
                   checkpoint_.file_of(name), name);
    plan.first_row = engram_shard_.first((*expected)[0]);
    plan.num_rows = engram_shard_.count((*expected)[0]);
    if (fp8) plan.form = Form::kFp8Rows;
  } else if (fp4) {
    plan.form = Form::kFp4;
  } else if (fp8) {
    // DeepSeek-V4.1's engram tables: a scale per 32 values of a row (rows are gathered one by one).
    plan.form = is_engram_table(name) ? Form::kFp8Rows : Form::kFp8Blocks;
  }
  if (plan.form != Form::kPlain) {
    plan.scale = scale;
    DI_INPUT_CHECK(!plan.scale.empty(), "{}: quantised tensor '{}' has neither '{}_scale_inv' nor a '.scale' beside it",
                   where, name, name);
    check_scales(name, *entry, plan);
  } else {
    DI_INPUT_CHECK(entry->dtype != DType::kF8E4M3 || scale.empty(), "{}: '{}' is FP8 e4m3 with scales beside it ('{}'), "
                   "but config.json has no quantization_config (quant_method fp8): its values would be read without "
                   "them", checkpoint_.file_of(name), name, scale);
  }
  if (plans_.emplace(name, std::move(plan)).second) names_.push_back(name);
}

void CheckpointTensors::check_scales(const std::string& name, const SafetensorsFile::Entry& entry,
                                     const Plan& plan) const {
  const SafetensorsFile::Entry& scales = *checkpoint_.find(plan.scale);
  const int64_t rows = entry.shape.size() == 2 ? entry.shape[0] : 0;
  const int64_t cols = entry.shape.size() == 2 ? entry.shape[1] * (plan.form == Form::kFp4 ? 2 : 1) : 0;
  const auto blocks = [](int64_t n, int64_t block) { return (n + block - 1) / block; };
  Shape want;
  std::string layout;
  if (plan.form == Form::kFp8Blocks) {
    want = {blocks(rows, quantization_.block_rows), blocks(cols, quantization_.block_cols)};
    layout = fmt::format("a scale per {} x {} block (config.json's weight_block_size)", quantization_.block_rows,
                         quantization_.block_cols);
  } else {
    want = {rows, blocks(cols, 32)};
    layout = "a scale per 32 values of a row";
  }
  const bool ue8m0_only = plan.form == Form::kFp4;
  const bool dtype_ok = scales.dtype == DType::kU8 || (!ue8m0_only && scales.dtype == DType::kF32);
  DI_INPUT_CHECK(entry.shape.size() == 2 && scales.shape == want && dtype_ok,
                 "{}: the scales of '{}' ('{}') are {} {}; its {} {} values need {} of shape {} ({})",
                 checkpoint_.file_of(plan.scale), name, plan.scale, dtype_name(scales.dtype), shape_str(scales.shape),
                 plan.form == Form::kFp4 ? "FP4" : "FP8", shape_str({rows, cols}),
                 ue8m0_only ? "UE8M0 bytes" : "f32 or UE8M0 bytes", shape_str(want), layout);
}

namespace {

// A weight that is not finite (a NaN or an infinity in the values, or in the scales they are multiplied by) turns
// every logit after it into NaN, and sampling then picks token 0 step after step: refused by name instead.
void check_finite(const Tensor& t, const std::string& name, const std::string& file) {
  const float* v = t.data<float>();
  const int64_t n = t.numel();
  int64_t bad = 0, first = n;
#pragma omp parallel for schedule(static) reduction(+ : bad) reduction(min : first) if (n > (1 << 20))
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) ++bad, first = std::min(first, i);
  DI_INPUT_CHECK(bad == 0, "{}: tensor '{}' is not finite at {} of its values (the first at index {}; its scales "
                 "applied where it has them): the checkpoint is damaged", file, name, bad, first);
}

}  // namespace

Tensor CheckpointTensors::read(const std::string& name) const {
  Tensor t = read_values(name);
  check_finite(t, name, checkpoint_.file_of(name));
  return t;
}

Tensor CheckpointTensors::read_values(const std::string& name) const {
  const auto it = plans_.find(name);
  DI_CHECK(it != plans_.end(), "weight '{}' is not one this rank loads", name);
  const Plan& plan = it->second;
  if (plan.num_rows >= 0) {
    Tensor rows = checkpoint_.read_rows(name, plan.first_row, plan.num_rows);
    if (plan.form != Form::kFp8Rows) return to_f32(rows);
    return dequantize_fp8_blocks(rows, checkpoint_.read_rows(plan.scale, plan.first_row, plan.num_rows), 1, 32);
  }
  switch (plan.form) {
    case Form::kFp4: return dequantize_fp4_groups(checkpoint_.read(name), checkpoint_.read(plan.scale), 32);
    case Form::kFp8Rows: return dequantize_fp8_blocks(checkpoint_.read(name), checkpoint_.read(plan.scale), 1, 32);
    case Form::kFp8Blocks:
      return dequantize_fp8_blocks(checkpoint_.read(name), checkpoint_.read(plan.scale), quantization_.block_rows,
                                   quantization_.block_cols);
    case Form::kPlain: break;
  }
  return to_f32(checkpoint_.read(name));
}

CheckpointTensors::Fp8Blocks CheckpointTensors::read_fp8(const std::string& name) const {
  DI_CHECK(stored_fp8(name), "weight '{}' is not stored as FP8 blocks", name);
  Tensor codes = checkpoint_.read(name);
  Tensor stored_scales = checkpoint_.read(plans_.at(name).scale);
  Tensor scales = Tensor::zeros(stored_scales.shape(), DType::kF32);
  if (stored_scales.dtype() == DType::kU8) {
    const auto* scale_bytes = static_cast<const uint8_t*>(stored_scales.raw_data());
    for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = ue8m0_to_float(scale_bytes[i]);
  } else {
    scales = to_f32(stored_scales);
  }
  const std::string file = checkpoint_.file_of(name);
  check_finite(scales, plans_.at(name).scale, checkpoint_.file_of(plans_.at(name).scale));
  const auto* bytes = static_cast<const uint8_t*>(codes.raw_data());
  int64_t nan_codes = 0;
  for (int64_t i = 0; i < codes.numel(); ++i) nan_codes += (bytes[i] & 0x7f) == 0x7f;  // e4m3fn's NaN
  DI_INPUT_CHECK(nan_codes == 0, "{}: tensor '{}' holds {} NaN codes: the checkpoint is damaged", file, name,
                 nan_codes);
  return {std::move(codes), std::move(scales)};
}

bool CheckpointTensors::stored_fp8(const std::string& name) const {
  const auto it = plans_.find(name);
  return it != plans_.end() && it->second.form == Form::kFp8Blocks;
}

}  // namespace deepinfer
