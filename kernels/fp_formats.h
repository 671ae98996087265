// The low-precision formats DeepSeek-V4.1 quantises to, for the host and the device alike (one definition, so the
// CPU and CUDA fake-quantisation agree bit for bit): float8 e4m3fn, float4 e2m1 and power-of-two (ue8m0) scales,
// with the reference's rounding and tie rules.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace deepinfer {

// The nearest float8 e4m3fn value (ties to even), |x| <= 448 expected.
DEEPINFER_HOST_DEVICE inline float round_e4m3(float x) {
  const float magnitude = fabsf(x);
  if (magnitude == 0.0f || x != x) return x;
  // Spacing of the e4m3 grid at this magnitude: 2^(e - 3), with e at least -6 (subnormals below 2^-6).
  const int e = ilogbf(magnitude);
  const float step = ldexpf(1.0f, (e > -6 ? e : -6) - 3);
  const float rounded = rintf(magnitude / step) * step;  // exact division; ties to even
  return copysignf(rounded < 448.0f ? rounded : 448.0f, x);
}

// 2^ceil(log2(t)) for t > 0, from the float's bits as the reference kernel does.
DEEPINFER_HOST_DEVICE inline float pow2_ceil(float t) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(t);
#else
  uint32_t bits;
  std::memcpy(&bits, &t, sizeof(bits));
#endif
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
  return ldexpf(1.0f, exponent);
}

// The e2m1 value nearest to x in [-6, 6]: grid 0, 0.5, 1, 1.5, 2, 3, 4, 6; a tie at a midpoint goes to the even
// code (up at 0.75, 1.75 and 3.5, down at 0.25, 1.25, 2.5 and 5). e2m1_index: the grid index (0..7) of a
// magnitude, which round_e2m1 and the codes below share.
DEEPINFER_HOST_DEVICE inline uint32_t e2m1_index(float m) {
  return (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) + (m > 5.0f);
}
DEEPINFER_HOST_DEVICE inline float round_e2m1(float x) {
  const auto code = static_cast<int>(e2m1_index(fabsf(x)));
  const float value = code <= 4 ? 0.5f * static_cast<float>(code) : code == 5 ? 3.0f : code == 6 ? 4.0f : 6.0f;
  return copysignf(value, x);
}

// One block of the window KV's FP8: e4m3 values with a power-of-two scale, quantised and dequantised in place.
DEEPINFER_HOST_DEVICE inline float fp8_block_scale(float amax) {
  return pow2_ceil((amax > 1e-4f ? amax : 1e-4f) * static_cast<float>(1.0 / 448.0));
}
DEEPINFER_HOST_DEVICE inline float fp8_dequantised(float x, float scale) {
  const float v = x / scale;
  return round_e4m3(v < -448.0f ? -448.0f : v > 448.0f ? 448.0f : v) * scale;
}

// One block of FP4: e2m1 values with an e4m3 scale (the compressed KV) or a power-of-two one (the indexer's).
DEEPINFER_HOST_DEVICE inline float fp4_block_scale(float amax, bool e4m3_scales) {
  if (e4m3_scales) {
    const float floor = 6.0f * ldexpf(1.0f, -9);
    return round_e4m3((amax > floor ? amax : floor) / 6.0f);
  }
  const float floor = 6.0f * ldexpf(1.0f, -126);
  return pow2_ceil((amax > floor ? amax : floor) * static_cast<float>(1.0 / 6.0));
}
DEEPINFER_HOST_DEVICE inline float fp4_dequantised(float x, float scale) {
  const float v = x / scale;
  return round_e2m1(v < -6.0f ? -6.0f : v > 6.0f ? 6.0f : v) * scale;
}

// FP4 weights as DeepSeek-V4's checkpoints store routed experts: e2m1 codes, two a byte (the even value in the low
// nibble), with a ue8m0 scale byte (2^(byte - 127)) for each 32 consecutive values of a row.
// The 4-bit code of x in [-6, 6]: the sign in bit 3, then the index of round_e2m1(|x|) on the grid.
DEEPINFER_HOST_DEVICE inline uint32_t e2m1_code(float x) {
  const uint32_t index = e2m1_index(fabsf(x));
  return (x < 0.0f && index != 0 ? 8u : 0u) | index;
}
// The value of a code: index e m (2 exponent bits, 1 mantissa bit) is m / 2 for e = 0, (1 + m / 2) 2^(e - 1) else.
DEEPINFER_HOST_DEVICE inline float e2m1_value(uint32_t code) {
  const uint32_t e = (code >> 1) & 3u, m = code & 1u;
  const float magnitude = e == 0 ? 0.5f * static_cast<float>(m) : ldexpf(1.0f + 0.5f * static_cast<float>(m), static_cast<int>(e) - 1);
  return code & 8u ? -magnitude : magnitude;
}
// The FP4 rows V4.1's cache keeps (the compressed entries, e4m3 scales per 16; the indexer keys, ue8m0 per 32):
// codes that keep the sign of a zero (the fake-quantised -0 comes back as -0, bit for bit), and (below, after the
// e4m3 codes) a block's scale byte, an e4m3 code or a ue8m0 byte, and its value.
DEEPINFER_HOST_DEVICE inline uint32_t e2m1_code_signed(float x) {
  return (copysignf(1.0f, x) < 0.0f ? 8u : 0u) | e2m1_index(fabsf(x));
}

// A block's ue8m0 scale byte, from its largest magnitude (the power of two fp4_block_scale picks), and its value.
DEEPINFER_HOST_DEVICE inline uint8_t ue8m0_scale_byte(float amax) {
  return static_cast<uint8_t>(ilogbf(fp4_block_scale(amax, false)) + 127);
}
DEEPINFER_HOST_DEVICE inline float ue8m0_value(uint32_t byte) { return ldexpf(1.0f, static_cast<int>(byte) - 127); }

// FP8 weights as DeepSeek-V4's checkpoints store projections: e4m3fn codes with a ue8m0 scale byte for each 32 x 32
// block. The code of x in [-448, 448] (round_e4m3's value: sign, 4 exponent bits biased by 7, 3 mantissa bits;
// exponent 0 the subnormals m 2^-9), and back.
DEEPINFER_HOST_DEVICE inline uint32_t e4m3_code(float x) {
  const float v = round_e4m3(x);
  const float m = fabsf(v);
  const uint32_t sign = copysignf(1.0f, v) < 0.0f ? 0x80u : 0u;  // -0 keeps its sign (code 0x80), as in the CPU forms
  if (m < ldexpf(1.0f, -6)) return sign | static_cast<uint32_t>(rintf(m * 512.0f));  // subnormal (or zero)
  const int e = ilogbf(m);
  const uint32_t mantissa = static_cast<uint32_t>(rintf((m / ldexpf(1.0f, e) - 1.0f) * 8.0f));
  return sign | (static_cast<uint32_t>(e + 7) << 3) | mantissa;
}
DEEPINFER_HOST_DEVICE inline float e4m3_value(uint32_t code) {
  const uint32_t e = (code >> 3) & 15u, m = code & 7u;
  const float magnitude = e == 0 ? static_cast<float>(m) * ldexpf(1.0f, -9)
                                 : ldexpf(1.0f + static_cast<float>(m) * 0.125f, static_cast<int>(e) - 7);
  return code & 0x80u ? -magnitude : magnitude;
}
DEEPINFER_HOST_DEVICE inline uint32_t fp4_scale_byte(float scale, bool e4m3_scales) {
  return e4m3_scales ? e4m3_code(scale) : static_cast<uint32_t>(ilogbf(scale) + 127);
}
DEEPINFER_HOST_DEVICE inline float fp4_scale_value(uint32_t byte, bool e4m3_scales) {
  return e4m3_scales ? e4m3_value(byte) : ue8m0_value(byte);
}

// A weight block's ue8m0 scale byte: the power of two that brings its largest magnitude within 448.
DEEPINFER_HOST_DEVICE inline uint8_t fp8_weight_scale_byte(float amax) {
  const float floor = 448.0f * ldexpf(1.0f, -126);
  return static_cast<uint8_t>(ilogbf(pow2_ceil((amax > floor ? amax : floor) * static_cast<float>(1.0 / 448.0))) + 127);
}


// A weight tile's fp32 scale as DeepSeek-V3's checkpoints were quantised (weight_scale_inv): its largest magnitude
// over 448, so the largest value takes the largest code; 1 for a tile of zeros (any scale gives zero codes).
DEEPINFER_HOST_DEVICE inline float fp8_tile_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }
}  // namespace deepinfer
