// Small device helpers shared by the kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ __nv_bfloat16 to_bf16(float v) { return __float2bfloat16(v); }

// The clamped SwiGLU of DeepSeek-V4.1 (swiglu_limit): with limit > 0, up is clamped to [-limit, limit] and gate
// from above at limit before silu(gate) * up, as the CPU's swiglu_expert_forward does; limit 0 leaves both.
__device__ __forceinline__ void clamp_swiglu(float& gate, float& up, float limit) {
  if (limit > 0.0f) {
    up = fminf(fmaxf(up, -limit), limit);
    gate = fminf(gate, limit);
  }
}

// A ue8m0 scale byte's power of two, from its bits (bytes >= 1, as ue8m0_scale_byte and fp8_weight_scale_byte in
// kernels/fp_formats.h write them; ue8m0_value there is the same value through ldexpf).
__device__ __forceinline__ float ue8m0_scale(uint8_t byte) { return __uint_as_float(static_cast<uint32_t>(byte) << 23); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// One warp's attention for one query row, one key at a time, in the lane-strided layout (register i holds
// element lane + 32 i): the query in registers, an online softmax over the scores the caller computes, and the
// softmax-weighted sum of the values (the scalar forms of the MLA kernels).
template <int kQRegs, int kAccRegs>
struct WarpOnlineAttention {
  float q[kQRegs], acc[kAccRegs];
  float running_max = -INFINITY, running_sum = 0.0f;

  // q = row[0, n) (zeros past n, and everywhere for an inactive warp); acc = 0.
  __device__ __forceinline__ void start(const __nv_bfloat16* row, int64_t n, int lane, bool active) {
#pragma unroll
    for (int i = 0; i < kQRegs; ++i) {
      const int64_t d = lane + 32 * i;
      q[i] = active && d < n ? to_float(row[d]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;
  }
  // The query's dot product with one key (the same on every lane): key[d] for d < split, key[d + gap] for
  // split <= d < n (a key whose second part is stored `gap` further on).
  __device__ __forceinline__ float dot(const __nv_bfloat16* key, int64_t n, int lane, int64_t split,
                                       int64_t gap) const {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kQRegs; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < split) sum += q[i] * to_float(key[d]);
      else if (d < n) sum += q[i] * to_float(key[gap + d]);
    }
    return warp_sum(sum);
  }
  // One key's score (the same on every lane) and its value row [0, n): the running maximum moves, what was
  // summed so far is rescaled, and the value is added with weight exp(score - max).
  __device__ __forceinline__ void add(float score, const __nv_bfloat16* value, int64_t n, int lane) {
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < n) acc[i] = acc[i] * correction + p * to_float(value[d]);
    }
    running_max = new_max;
  }
};

// One RoPE rotation of the pair (x0, x1) by an angle whose cosine and sine are c and s, with every product
// rounded on its own (no fused multiply-add): the kernels that rotate (rope, mla_prepare) then agree bit for
// bit whatever the compiler would contract in each.
__device__ __forceinline__ void rotate_pair(float x0, float x1, float c, float s, __nv_bfloat16& y0,
                                            __nv_bfloat16& y1) {
  y0 = __float2bfloat16(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
  y1 = __float2bfloat16(__fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
}

// Dot product of eight bf16 pairs held in two 16-byte pieces, in fp32.
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const auto* ap = reinterpret_cast<const __nv_bfloat162*>(&a);
  const auto* bp = reinterpret_cast<const __nv_bfloat162*>(&b);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 x = __bfloat1622float2(ap[j]), y = __bfloat1622float2(bp[j]);
    sum += x.x * y.x + x.y * y.y;
  }
  return sum;
}

// The vectorised RMSNorm's layout (add_rms_norm, and the unpermute that ends in it): a block of kNormThreads
// threads a row, piece p (8 values) at thread p % kNormThreads, at most kNormPieces pieces a thread. Kernels that
// must give the same bits share it, so their sums of squares add in the same order.
constexpr int kNormThreads = 256, kNormPieces = 4;

// RMSNorm's last step for 8 values: v * inv_rms * weight, rounded to bf16 (rms_norm.cu, moe_permute.cu).
__device__ __forceinline__ uint4 rms_scale8(const uint4& v, float inv_rms, const uint4& weight) {
  const auto* vb = reinterpret_cast<const __nv_bfloat162*>(&v);
  const auto* wb = reinterpret_cast<const __nv_bfloat162*>(&weight);
  uint4 result;
  auto* ob = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(vb[i]), g = __bfloat1622float2(wb[i]);
    ob[i] = __floats2bfloat162_rn(x.x * inv_rms * g.x, x.y * inv_rms * g.y);
  }
  return result;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024). Every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) total = v;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // partial/total may be reused by a following call
  return result;
}

}  // namespace deepinfer::cuda
