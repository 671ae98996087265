// Where the CUDA model's weights come from: a checkpoint read one tensor at a time as it is uploaded (the host holds
// one tensor, never the rank's weights), host tensors already loaded (a WeightStore: the tests), or the seeded dummy
// values generated directly on the device (no host copy: DeepSeek-V2-Lite's 16 B parameters would need 64 GB of host
// fp32 first).
#pragma once

#include <cuda_bf16.h>

#include <optional>
#include <string>

#include "src/model/checkpoint_tensors.h"
#include "src/model/weights.h"

namespace deepinfer {

class DeviceWeightSource {
 public:
  virtual ~DeviceWeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual void fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const = 0;
  virtual void fill_f32(const std::string& name, const Shape& shape, float* dst) const = 0;
  // Rows [first_row, first_row + num_rows) of the tensor of `shape` (a rank's part of a split table; a host
  // store holds just those rows).
  virtual void fill_bf16_rows(const std::string& name, const Shape& shape, int64_t first_row, int64_t num_rows,
                              __nv_bfloat16* dst) const = 0;
  // Whether the checkpoint stores `name` as FP8 e4m3 blocks; nullopt where there is no checkpoint (dummy values:
  // the model's quantization_config decides, as the released checkpoint would store it).
  virtual std::optional<bool> stored_fp8(const std::string& name) const = 0;
  // A weight of `shape` [n, k] as FP8 e4m3 codes [n, k] and fp32 scales a block x block tile ([ceil(n / block),
  // ceil(k / block)]), into device memory: a checkpoint's codes and scales as stored (its block must be `block`),
  // a host store's values brought back to the codes and scales they were (cpu::recover_fp8_scaled), dummy values
  // quantised on the device (cuda::quantize_fp8_scaled).
  virtual void fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                        float* scales) const = 0;
};

class HostWeightSource final : public DeviceWeightSource {
 public:
  explicit HostWeightSource(const WeightStore& weights) : weights_(weights) {}
  bool has(const std::string& name) const override { return weights_.data_or_null(name) != nullptr; }
  void fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const override;
  void fill_f32(const std::string& name, const Shape& shape, float* dst) const override;
  void fill_bf16_rows(const std::string& name, const Shape& shape, int64_t first_row, int64_t num_rows,
                      __nv_bfloat16* dst) const override;
  std::optional<bool> stored_fp8(const std::string& name) const override { return weights_.stored_as_fp8(name); }
  void fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                float* scales) const override;

 private:
  const WeightStore& weights_;
};

class CheckpointWeightSource final : public DeviceWeightSource {
 public:
  explicit CheckpointWeightSource(const CheckpointTensors& tensors) : tensors_(tensors) {}
  bool has(const std::string& name) const override { return tensors_.has(name); }
  void fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const override;
  void fill_f32(const std::string& name, const Shape& shape, float* dst) const override;
  void fill_bf16_rows(const std::string& name, const Shape& shape, int64_t first_row, int64_t num_rows,
                      __nv_bfloat16* dst) const override;
  std::optional<bool> stored_fp8(const std::string& name) const override { return tensors_.stored_fp8(name); }
  void fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                float* scales) const override;

 private:
  const CheckpointTensors& tensors_;
};

class DummyWeightSource final : public DeviceWeightSource {
 public:
  DummyWeightSource(uint64_t seed, WeightStore::TensorFilter wanted) : seed_(seed), wanted_(std::move(wanted)) {}
  bool has(const std::string& name) const override { return !wanted_ || wanted_(name); }
  void fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const override;
  void fill_f32(const std::string& name, const Shape& shape, float* dst) const override;
  void fill_bf16_rows(const std::string& name, const Shape& shape, int64_t first_row, int64_t num_rows,
                      __nv_bfloat16* dst) const override;
  std::optional<bool> stored_fp8(const std::string&) const override { return std::nullopt; }
  void fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                float* scales) const override;

 private:
  uint64_t seed_;
  WeightStore::TensorFilter wanted_;
};

}  // namespace deepinfer
