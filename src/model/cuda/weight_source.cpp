#include "src/model/cuda/weight_source.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cpu/fp8_weights.h"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "src/core/device_array.h"

namespace deepinfer {

namespace {

void upload_bf16(const std::string& name, const Tensor& t, const Shape& shape, __nv_bfloat16* dst) {
  DI_CHECK(t.shape() == shape, "weight '{}' is {}, expected {}", name, shape_str(t.shape()), shape_str(shape));
  std::vector<uint16_t> bits(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] = float_to_bf16(t.data<float>()[i]);
  DI_CUDA_CHECK(cudaMemcpy(dst, bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
}

void upload_f32(const std::string& name, const Tensor& t, const Shape& shape, float* dst) {
  DI_CHECK(t.shape() == shape, "weight '{}' is {}, expected {}", name, shape_str(t.shape()), shape_str(shape));
  DI_CUDA_CHECK(cudaMemcpy(dst, t.data<float>(), t.nbytes(), cudaMemcpyHostToDevice));
}

int64_t tiles(const Shape& shape, int64_t block) {
  return (shape[0] + block - 1) / block * ((shape[1] + block - 1) / block);
}

// Rows [first_row, first_row + num_rows) of a tensor of `shape`: a split table, whose rows the loader read alone.
Shape held_rows(Shape shape, int64_t num_rows) {
  shape[0] = num_rows;
  return shape;
}

}  // namespace

void HostWeightSource::fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const {
  upload_bf16(name, weights_.get(name), shape, dst);
}

// (first_row unused: the store, like the checkpoint's reader, loaded only these rows.)
void HostWeightSource::fill_bf16_rows(const std::string& name, const Shape& shape, int64_t, int64_t num_rows,
                                      __nv_bfloat16* dst) const {
  fill_bf16(name, held_rows(shape, num_rows), dst);
}

void HostWeightSource::fill_f32(const std::string& name, const Shape& shape, float* dst) const {
  upload_f32(name, weights_.get(name), shape, dst);
}

void HostWeightSource::fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                                float* scales) const {
  const Tensor& t = weights_.get(name);
  DI_CHECK(t.shape() == shape && shape.size() == 2, "weight '{}' is {}, expected {}", name, shape_str(t.shape()),
           shape_str(shape));
  std::vector<uint8_t> host_codes(t.numel());
  std::vector<float> host_scales(tiles(shape, block));
  cpu::recover_fp8_scaled(t.data<float>(), shape[0], shape[1], block, host_codes.data(), host_scales.data());
  DI_CUDA_CHECK(cudaMemcpy(codes, host_codes.data(), host_codes.size(), cudaMemcpyHostToDevice));
  DI_CUDA_CHECK(cudaMemcpy(scales, host_scales.data(), host_scales.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void CheckpointWeightSource::fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                                      float* scales) const {
  const QuantizationConfig& q = tensors_.quantization();
  DI_CHECK(q.block_rows == block && q.block_cols == block, "weight '{}': FP8 tiles of {} x {} read as {} x {}", name,
           q.block_rows, q.block_cols, block, block);
  const CheckpointTensors::Fp8Blocks stored = tensors_.read_fp8(name);
  DI_CHECK(stored.codes.shape() == shape && stored.scales.numel() == tiles(shape, block),
           "weight '{}' is {} with {} scales, expected {}", name, shape_str(stored.codes.shape()),
           stored.scales.numel(), shape_str(shape));
  DI_CUDA_CHECK(cudaMemcpy(codes, stored.codes.raw_data(), stored.codes.nbytes(), cudaMemcpyHostToDevice));
  DI_CUDA_CHECK(cudaMemcpy(scales, stored.scales.raw_data(), stored.scales.nbytes(), cudaMemcpyHostToDevice));
}

void CheckpointWeightSource::fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const {
  upload_bf16(name, tensors_.read(name), shape, dst);
}

void CheckpointWeightSource::fill_bf16_rows(const std::string& name, const Shape& shape, int64_t, int64_t num_rows,
                                            __nv_bfloat16* dst) const {
  fill_bf16(name, held_rows(shape, num_rows), dst);
}

void CheckpointWeightSource::fill_f32(const std::string& name, const Shape& shape, float* dst) const {
  upload_f32(name, tensors_.read(name), shape, dst);
}

void DummyWeightSource::fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const {
  const DummyRule rule = dummy_rule(name, shape, seed_);
  cuda::fill_dummy_bf16(dst, shape_numel(shape), rule.key, rule.scale, rule.offset, nullptr);
  DI_CUDA_CHECK(cudaGetLastError());
}

void DummyWeightSource::fill_bf16_rows(const std::string& name, const Shape& shape, int64_t first_row,
                                       int64_t num_rows, __nv_bfloat16* dst) const {
  const DummyRule rule = dummy_rule(name, shape, seed_);
  const int64_t row = shape_numel(shape) / std::max<int64_t>(shape[0], 1);
  cuda::fill_dummy_bf16(dst, num_rows * row, rule.key, rule.scale, rule.offset, nullptr, first_row * row);
  DI_CUDA_CHECK(cudaGetLastError());
}

void DummyWeightSource::fill_fp8(const std::string& name, const Shape& shape, int64_t block, uint8_t* codes,
                                 float* scales) const {
  DeviceArray<__nv_bfloat16> values(shape_numel(shape));
  fill_bf16(name, shape, values.data());
  cuda::quantize_fp8_scaled(values.data(), shape[0], shape[1], static_cast<int32_t>(block), codes, scales, nullptr);
  DI_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // before the values go
}

void DummyWeightSource::fill_f32(const std::string& name, const Shape& shape, float* dst) const {
  const DummyRule rule = dummy_rule(name, shape, seed_);
  cuda::fill_dummy_f32(dst, shape_numel(shape), rule.key, rule.scale, rule.offset, nullptr);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer
