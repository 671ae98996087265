// e4m3 codes to floats on the device, by the hardware conversion (exact: every e4m3 value is an f16 value), for the
// kernels that read FP8 bytes (the FP8 projections, the V4.1 window cache).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace deepinfer::cuda {

// Two e4m3 codes (the first in the low byte) as floats.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// Sixteen e4m3 codes times one power-of-two scale as bf16 pairs (exact), in the codes' order.
__device__ __forceinline__ void e4m3x16_to_bf16(const uint4& codes, float scale, uint4 (&out)[2]) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t pairs[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 lo = e4m3x2_to_float2(words[w] & 0xffffu), hi = e4m3x2_to_float2(words[w] >> 16);
    const __nv_bfloat162 a = __floats2bfloat162_rn(lo.x * scale, lo.y * scale);
    const __nv_bfloat162 b = __floats2bfloat162_rn(hi.x * scale, hi.y * scale);
    pairs[2 * w] = *reinterpret_cast<const uint32_t*>(&a);
    pairs[2 * w + 1] = *reinterpret_cast<const uint32_t*>(&b);
  }
  out[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  out[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
}

// 2^(byte - 127), a ue8m0 scale byte's value.
__device__ __forceinline__ float ue8m0_to_float(uint32_t byte) { return __uint_as_float(byte << 23); }

}  // namespace deepinfer::cuda
