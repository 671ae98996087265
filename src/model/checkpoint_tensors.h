// A safetensors checkpoint's tensors for one rank, checked whole when opened and read one at a time, each in fp32
// as the models compute with it (FP8 and FP4 dequantised with their scales; of an engram table split across the EP
// group, this rank's rows). WeightStore::load reads them all into host memory (the CPU models); the CUDA backend
// reads each as it uploads it (CheckpointWeightSource), so its host holds one tensor at a time rather than the rank's
// weights in fp32 (a DeepSeek-V3 rank at EP 8 holds 100 GB of weights as stored, 400 GB in fp32).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/model_config.h"
#include "src/model/safetensors.h"

namespace deepinfer {

class CheckpointTensors {
 public:
  using TensorFilter = std::function<bool(const std::string& name)>;
  // Checks every tensor the rank loads (the architecture's, those `wanted` picks, an optional part whole or not at
  // all, the architecture's extra tensors): present, shaped as the config says, of a floating or quantised type, the
  // scales of a quantised one beside it. An InputError names the first that is not, before anything is read.
  CheckpointTensors(const ModelConfig& config, const std::filesystem::path& model_path,
                    const TensorFilter& wanted = nullptr);

  // The tensors the rank loads, in the order they are checked.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return plans_.contains(name); }
  // fp32 (the rank's rows of a split engram table). InputError for a value that is not finite.
  Tensor read(const std::string& name) const;
  // Whether the checkpoint stores `name` as FP8 e4m3 blocks (the CUDA backend keeps those as FP8 again).
  bool stored_fp8(const std::string& name) const;
  // A stored_fp8 tensor as stored: its e4m3 codes (u8, [n, k]) and its block scales in fp32 ([ceil(n / rows),
  // ceil(k / cols)] of the config's weight_block_size; UE8M0 bytes as their values). InputError for a code or a
  // scale that is not finite.
  struct Fp8Blocks {
    Tensor codes, scales;
  };
  Fp8Blocks read_fp8(const std::string& name) const;
  const QuantizationConfig& quantization() const { return quantization_; }
  const std::filesystem::path& path() const { return checkpoint_.dir(); }

 private:
  enum class Form {
    kPlain,      // fp32, bf16, fp16 (or FP8 without a quantization_config): converted
    kFp4,        // two e2m1 values a byte, a UE8M0 scale per 32 values of a row
    kFp8Rows,    // FP8 with a scale per 32 values of a row (DeepSeek-V4.1's engram tables)
    kFp8Blocks,  // FP8 with a scale per quantization block (DeepSeek-V3's weight_scale_inv)
  };
  struct Plan {
    Form form = Form::kPlain;
    std::string scale;              // the scales' tensor of a quantised one
    int64_t first_row = 0;          // a split engram table: this rank's rows
    int64_t num_rows = -1;          // -1: every row
  };
  // Checks `name` (of logical shape `expected`, when known) and plans its read.
  void check(const std::string& name, const Shape* expected);
  Tensor read_values(const std::string& name) const;
  std::string scale_name(const std::string& name) const;  // empty when there is none
  // The scales' type and shape against the tensor's and the config's blocks.
  void check_scales(const std::string& name, const SafetensorsFile::Entry& entry, const Plan& plan) const;

  SafetensorsCheckpoint checkpoint_;
  QuantizationConfig quantization_;
  RowShard engram_shard_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, Plan> plans_;
};

}  // namespace deepinfer
