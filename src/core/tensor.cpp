#include "src/core/tensor.h"

#include <cmath>
#include <cstring>

namespace deepinfer {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kF8E4M3: case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

std::string shape_str(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return text + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  for (int64_t d : shape) DI_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  // make_shared<T[]> value-initialises, i.e. zeroes the bytes.
  t.storage_ = std::make_shared<std::byte[]>(std::max<size_t>(t.nbytes(), 1));
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  DI_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  DI_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "bad row slice [{}, {}) of {}", begin,
           end, shape_str(shape_));
  Tensor t = *this;
  const int64_t row_elems = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.shape_[0] = end - begin;
  t.offset_bytes_ += static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  return t;
}

float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

uint16_t float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if (std::isnan(value)) return 0x7fc0;
  word += 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>(word >> 16);
}

float fp16_to_float(uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  float value;
  if (exponent == 0) value = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31) value = mantissa ? NAN : INFINITY;
  else value = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return sign ? -value : value;
}

float fp8e4m3_to_float(uint8_t bits) {
  // OCP e4m3fn: bias 7, no infinities, 0x7f/0xff are NaN.
  const int sign = bits >> 7;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float value;
  if (exponent == 0xf && mantissa == 0x7) value = NAN;
  else if (exponent == 0) value = std::ldexp(static_cast<float>(mantissa), -9);
  else value = std::ldexp(static_cast<float>(mantissa | 0x8), exponent - 10);
  return sign ? -value : value;
}

Tensor to_f32(const Tensor& tensor) {
  Tensor out = Tensor::zeros(tensor.shape(), DType::kF32);
  float* dst = out.data<float>();
  const int64_t n = tensor.numel();
  switch (tensor.dtype()) {
    case DType::kF32:
      std::memcpy(dst, tensor.raw_data(), tensor.nbytes());
      break;
    case DType::kBF16: {
      const auto* src = static_cast<const uint16_t*>(tensor.raw_data());
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
      break;
    }
    case DType::kF16: {
      const auto* src = static_cast<const uint16_t*>(tensor.raw_data());
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
      break;
    }
    case DType::kF8E4M3: {
      const auto* src = static_cast<const uint8_t*>(tensor.raw_data());
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8e4m3_to_float(src[i]);
      break;
    }
    default:
      DI_CHECK(false, "cannot convert a {} tensor to f32", dtype_name(tensor.dtype()));
  }
  return out;
}

}  // namespace deepinfer
