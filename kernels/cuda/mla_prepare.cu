#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_prepare.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

// One block per token.
__global__ void mla_prepare_kernel(const __nv_bfloat16* kv, const __nv_bfloat16* norm_weight, float eps,
                                   __nv_bfloat16* q, const int32_t* positions, const float* inv_freq,
                                   float attention_factor, bool interleaved, const int64_t* slots,
                                   __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape s) {
  const int64_t t = blockIdx.x, entry = s.lora + s.rope, qk = s.nope + s.rope, half = s.rope / 2;
  const __nv_bfloat16* in = kv + t * entry;
  __nv_bfloat16* out = cache + slots[t] * entry;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < s.lora; i += kThreads) sum_sq += to_float(in[i]) * to_float(in[i]);
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(s.lora) + eps);
  for (int64_t i = threadIdx.x; i < s.lora; i += kThreads)
    out[i] = to_bf16(to_float(in[i]) * inv_rms * to_float(norm_weight[i]));

  const float position = static_cast<float>(positions[t]);
  // Pair i of the rotary part of `src`, rotated into `dst` (and `also`, if given).
  auto rotate = [&](const __nv_bfloat16* src, __nv_bfloat16* dst, __nv_bfloat16* also, int64_t i) {
    const float angle = position * inv_freq[i];
    float sn, cs;
    sincosf(angle, &sn, &cs);
    cs *= attention_factor;
    sn *= attention_factor;
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = to_float(src[a]), x1 = to_float(src[b]);
    const __nv_bfloat16 y0 = to_bf16(x0 * cs - x1 * sn), y1 = to_bf16(x1 * cs + x0 * sn);
    dst[a] = y0;
    dst[b] = y1;
    if (also != nullptr) also[a] = y0, also[b] = y1;
  };
  for (int64_t i = threadIdx.x; i < half; i += kThreads) rotate(in + s.lora, out + s.lora, nullptr, i);
  for (int64_t idx = threadIdx.x; idx < s.heads * half; idx += kThreads) {
    const int64_t h = idx / half, i = idx % half;
    __nv_bfloat16* q_pe = q + (t * s.heads + h) * qk + s.nope;
    rotate(q_pe, q_pe, q_latent != nullptr ? q_latent + (t * s.heads + h) * entry + s.lora : nullptr, i);
  }
}

}  // namespace

void mla_prepare(const __nv_bfloat16* kv, const __nv_bfloat16* kv_norm_weight, float eps, __nv_bfloat16* q,
                 const int32_t* positions, const float* inv_freq, float attention_factor, bool interleaved,
                 const int64_t* slots, __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape shape,
                 cudaStream_t stream) {
  if (shape.tokens == 0) return;
  mla_prepare_kernel<<<static_cast<unsigned>(shape.tokens), kThreads, 0, stream>>>(
      kv, kv_norm_weight, eps, q, positions, inv_freq, attention_factor, interleaved, slots, cache, q_latent, shape);
}

}  // namespace deepinfer::cuda
