#include "src/model/cuda/weight_source.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "kernels/cuda/dummy_init.cuh"

namespace deepinfer {

void HostWeightSource::fill_bf16(const std::string& name, const Shape& shape, __nv_bfloat16* dst) const {
  const Tensor& t = weights_.get(name);
  DI_CHECK(t.shape() == shape, "weight '{}' is {}, expected {}", name, shape_str(t.shape()), shape_str(shape));
  std::vector<uint16_t> bits(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] = float_to_bf16(t.data<float>()[i]);
  DI_CUDA_CHECK(cudaMemcpy(dst, bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
}

void HostWeightSource::fill_bf16_rows(const std::string& name, const Shape& shape, int64_t first_row,
                                      int64_t num_rows, __nv_bfloat16* dst) const {
  Shape rows = shape;
  rows[0] = num_rows;
  (void)first_row;  // the store loaded only these rows (WeightStore::load)
  fill_bf16(name, rows, dst);
}

void HostWeightSource::fill_f32(const std::string& name, const Shape& shape, float* dst) const {
  const Tensor& t = weights_.get(name);
  DI_CHECK(t.shape() == shape, "weight '{}' is {}, expected {}", name, shape_str(t.shape()), shape_str(shape));
  DI_CUDA_CHECK(cudaMemcpy(dst, t.data<float>(), t.nbytes(), cudaMemcpyHostToDevice));
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
