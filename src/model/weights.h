// WeightStore: every tensor an architecture needs, in fp32 on the host, from a safetensors checkpoint (fp32,
// bf16, fp16; one file or shards) or seeded random values (--load-format dummy, for any shape).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "src/core/tensor.h"
#include "src/model/model_config.h"

namespace deepinfer {

enum class LoadFormat { kAuto, kSafetensors, kDummy };
LoadFormat parse_load_format(const std::string& text);  // "auto", "safetensors", "dummy"

class WeightStore {
 public:
  // `model_path` is a checkpoint directory or, with kDummy, possibly a bare config file. A missing tensor or
  // a mis-shaped one is an InputError naming the tensor and the file.
  // `wanted`, when given, picks the tensors this rank needs (expert parallelism loads only owned experts).
  using TensorFilter = std::function<bool(const std::string& name)>;
  static WeightStore load(const ModelConfig& config, const std::filesystem::path& model_path, LoadFormat format,
                          uint64_t seed, const TensorFilter& wanted = nullptr);

  const Tensor& get(const std::string& name) const;
  void set(const std::string& name, Tensor tensor) { tensors_[name] = std::move(tensor); }
  // Moves the tensor out of the store (the caller owns it from now on).
  Tensor take(const std::string& name);
  const float* data(const std::string& name) const { return get(name).data<float>(); }
  const float* data_or_null(const std::string& name) const;
  size_t num_tensors() const { return tensors_.size(); }
  int64_t num_parameters() const;
  // Whether the checkpoint held `name` as FP8 e4m3 blocks (the store has its dequantised values): the CUDA
  // backend keeps those as FP8 again, and only those.
  bool stored_as_fp8(const std::string& name) const { return stored_fp8_.contains(name); }

 private:
  std::unordered_map<std::string, Tensor> tensors_;
  std::unordered_set<std::string> stored_fp8_;
};

// InputError unless `model_path` is a checkpoint directory (a config file alone needs --load-format dummy).
void require_checkpoint_dir(const std::filesystem::path& model_path);

// The seeded value of a dummy tensor: N(0,1)/sqrt(fan_in) for matrices, 1 + 0.2 N(0,1) for norm weights,
// 0.1 N(0,1) for biases. Depends only on (seed, name, index).
Tensor make_dummy_tensor(const std::string& name, const Shape& shape, uint64_t seed);
// Rows [first_row, first_row + num_rows) of the dummy tensor of `shape` (its values there, not a new draw).
Tensor make_dummy_rows(const std::string& name, const Shape& shape, int64_t first_row, int64_t num_rows,
                       uint64_t seed);
// DeepSeek-V4.1's engram tables (`layers.N.engram.embed.weight`), the tensors split across ranks by rows.
bool is_engram_table(const std::string& name);

struct DummyRule {
  uint64_t key;  // the generator key of the tensor
  float scale;
  float offset;
};
DummyRule dummy_rule(const std::string& name, const Shape& shape, uint64_t seed);

}  // namespace deepinfer
