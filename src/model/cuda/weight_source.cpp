#include "src/model/cuda/weight_source.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cuda/dummy_init.cuh"

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

void DummyWeightSource::fill_f32(const std::string& name, const Shape& shape, float* dst) const {
  const DummyRule rule = dummy_rule(name, shape, seed_);
  cuda::fill_dummy_f32(dst, shape_numel(shape), rule.key, rule.scale, rule.offset, nullptr);
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer
