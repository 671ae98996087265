#include "kernels/cpu/fp8_weights.h"

#include <algorithm>
#include <cmath>

#include "kernels/fp_formats.h"

namespace deepinfer::cpu {

void quantize_fp8_blocks(const float* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales) {
  for (int64_t br = 0; br < n / 32; ++br)
    for (int64_t bc = 0; bc < k / 32; ++bc) {
      float amax = 0.0f;
      for (int64_t r = br * 32; r < br * 32 + 32; ++r)
        for (int64_t c = bc * 32; c < bc * 32 + 32; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      const uint8_t byte = fp8_weight_scale_byte(amax);
      scales[br * (k / 32) + bc] = byte;
      const float scale = ue8m0_value(byte);
      for (int64_t r = br * 32; r < br * 32 + 32; ++r)
        for (int64_t c = bc * 32; c < bc * 32 + 32; ++c)
          codes[r * k + c] = static_cast<uint8_t>(e4m3_code(std::clamp(w[r * k + c] / scale, -448.0f, 448.0f)));
    }
}

void dequantize_fp8_blocks(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, float* out) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      out[r * k + c] = e4m3_value(codes[r * k + c]) * ue8m0_value(scales[(r / 32) * (k / 32) + c / 32]);
}

}  // namespace deepinfer::cpu
