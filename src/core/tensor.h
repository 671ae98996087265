// Tensor: a shape, a dtype and host storage shared between views. The CPU backend computes in fp32; other
// dtypes exist for loading (bf16/fp16/fp8 checkpoints) and for the device backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/check.h"

namespace deepinfer {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kI32, kI64, kU8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised host tensor.
  static Tensor zeros(Shape shape, DType dtype = DType::kF32);

  const Shape& shape() const { return shape_; }
  int64_t size(int axis) const { return shape_.at(axis < 0 ? axis + shape_.size() : axis); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  bool defined() const { return storage_ != nullptr; }

  void* raw_data() { return storage_.get() + offset_bytes_; }
  const void* raw_data() const { return storage_.get() + offset_bytes_; }

  template <class T>
  T* data() {
    DI_CHECK(dtype_ == dtype_of<T>(), "tensor of {} accessed as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }
  template <class T>
  const T* data() const {
    DI_CHECK(dtype_ == dtype_of<T>(), "tensor of {} accessed as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<const T*>(raw_data());
  }

  // Same storage, new shape with the same number of elements.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the first axis, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<std::byte[]> storage_;
  size_t offset_bytes_ = 0;
};

// bf16 / fp16 / fp8 (e4m3) to fp32, exactly.
float bf16_to_float(uint16_t bits);
float fp16_to_float(uint16_t bits);
float fp8e4m3_to_float(uint8_t bits);
uint16_t float_to_bf16(float value);  // round to nearest even

// Any floating tensor to a new fp32 tensor (a copy even when already fp32).
Tensor to_f32(const Tensor& tensor);

}  // namespace deepinfer
