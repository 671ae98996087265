#include "src/model/quantization.h"

#include <cmath>

namespace deepinfer {

float ue8m0_to_float(uint8_t e) { return e == 0xff ? NAN : std::ldexp(1.0f, static_cast<int>(e) - 127); }

float fp4_e2m1_to_float(uint8_t nibble) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitude[nibble & 0x7];
  return (nibble & 0x8) ? -v : v;
}

Tensor dequantize_fp8_blocks(const Tensor& fp8, const Tensor& scale, int64_t block_rows, int64_t block_cols) {
  DI_CHECK(fp8.dtype() == DType::kF8E4M3 && fp8.ndim() == 2, "fp8 weights must be 2-D f8e4m3, got {} {}",
           dtype_name(fp8.dtype()), shape_str(fp8.shape()));
  const int64_t rows = fp8.size(0), cols = fp8.size(1);
  const Shape want{(rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols};
  DI_INPUT_CHECK(scale.shape() == want, "block scales of shape {} for fp8 weights {} in {}x{} blocks (expected {})",
                 shape_str(scale.shape()), shape_str(fp8.shape()), block_rows, block_cols, shape_str(want));
  DI_INPUT_CHECK(scale.dtype() == DType::kF32 || scale.dtype() == DType::kU8,
                 "block scales must be f32 or UE8M0 bytes, got {}", dtype_name(scale.dtype()));
  Tensor out = Tensor::zeros({rows, cols});
  const auto* q = static_cast<const uint8_t*>(fp8.raw_data());
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t s = (r / block_rows) * want[1] + c / block_cols;
      const float factor = scale.dtype() == DType::kF32 ? scale.data<float>()[s]
                                                        : ue8m0_to_float(static_cast<const uint8_t*>(scale.raw_data())[s]);
      dst[r * cols + c] = fp8e4m3_to_float(q[r * cols + c]) * factor;
    }
  }
  return out;
}

Tensor dequantize_fp4_groups(const Tensor& packed, const Tensor& scale, int64_t group) {
  DI_CHECK(packed.dtype() == DType::kU8 && packed.ndim() == 2, "fp4 weights must be 2-D bytes, got {} {}",
           dtype_name(packed.dtype()), shape_str(packed.shape()));
  const int64_t rows = packed.size(0), cols = 2 * packed.size(1);
  DI_INPUT_CHECK(cols % group == 0 && scale.dtype() == DType::kU8 && scale.shape() == Shape({rows, cols / group}),
                 "UE8M0 group scales of shape {} {} for fp4 weights of {} x {} in groups of {}",
                 dtype_name(scale.dtype()), shape_str(scale.shape()), rows, cols, group);
  Tensor out = Tensor::zeros({rows, cols});
  const auto* q = static_cast<const uint8_t*>(packed.raw_data());
  const auto* s = static_cast<const uint8_t*>(scale.raw_data());
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = q[r * (cols / 2) + c / 2];
      const uint8_t nibble = (c % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      dst[r * cols + c] = fp4_e2m1_to_float(nibble) * ue8m0_to_float(s[r * (cols / group) + c / group]);
    }
  }
  return out;
}

}  // namespace deepinfer
