#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mla_prepare.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kLatentPerThread = 4;  // lora <= 1024
constexpr int kRopePerThread = 4;    // rotary pairs a thread loads before it stores any (a batch)

// One block per token. Every load of a phase is issued before its stores (the query tails rotate in place, so
// the compiler would otherwise wait out one memory latency per element): one round trip for the latent norm and
// one per batch of rotary pairs, in the same order of arithmetic as the kernels it replaces.
__global__ void mla_prepare_kernel(const __nv_bfloat16* kv, const __nv_bfloat16* norm_weight, float eps,
                                   __nv_bfloat16* q, const int32_t* positions, const float* inv_freq,
                                   float attention_factor, bool interleaved, const int64_t* slots,
                                   __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape s) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x, entry = s.lora + s.rope, qk = s.nope + s.rope, half = s.rope / 2;
  const __nv_bfloat16* in = kv + t * s.kv_stride;
  __nv_bfloat16* out = cache + slots[t] * entry;
  const float position = static_cast<float>(positions[t]);

  float latent[kLatentPerThread], gain[kLatentPerThread];
#pragma unroll
  for (int j = 0; j < kLatentPerThread; ++j) {
    const int64_t i = threadIdx.x + j * kThreads;
    latent[j] = i < s.lora ? to_float(in[i]) : 0.0f;
    gain[j] = i < s.lora ? to_float(norm_weight[i]) : 0.0f;
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kLatentPerThread; ++j) sum_sq += latent[j] * latent[j];  // zeros past lora add nothing
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(s.lora) + eps);
#pragma unroll
  for (int j = 0; j < kLatentPerThread; ++j) {
    const int64_t i = threadIdx.x + j * kThreads;
    if (i < s.lora) out[i] = to_bf16(latent[j] * inv_rms * gain[j]);
  }

  // Rotary pair (h, i): h = -1 is the cache entry's rotary part, h >= 0 query head h (written to q in place and
  // to q_latent's tail).
  const int64_t pairs = (s.heads + 1) * half;
  for (int64_t first = 0; first < pairs; first += kThreads * kRopePerThread) {
    float x0[kRopePerThread], x1[kRopePerThread], freq[kRopePerThread];
#pragma unroll
    for (int j = 0; j < kRopePerThread; ++j) {
      const int64_t idx = first + threadIdx.x + j * kThreads;
      if (idx >= pairs) continue;
      const int64_t h = idx / half - 1, i = idx % half;
      const __nv_bfloat16* src = h < 0 ? in + s.lora : q + t * s.q_stride + h * qk + s.nope;
      x0[j] = to_float(src[interleaved ? 2 * i : i]);
      x1[j] = to_float(src[interleaved ? 2 * i + 1 : i + half]);
      freq[j] = inv_freq[i];
    }
#pragma unroll
    for (int j = 0; j < kRopePerThread; ++j) {
      const int64_t idx = first + threadIdx.x + j * kThreads;
      if (idx >= pairs) continue;
      const int64_t h = idx / half - 1, i = idx % half;
      float sn, cs;
      sincosf(position * freq[j], &sn, &cs);
      cs *= attention_factor;
      sn *= attention_factor;
      __nv_bfloat16 y0, y1;
      rotate_pair(x0[j], x1[j], cs, sn, y0, y1);
      const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
      __nv_bfloat16* dst = h < 0 ? out + s.lora : q + t * s.q_stride + h * qk + s.nope;
      dst[a] = y0;
      dst[b] = y1;
      if (h >= 0 && q_latent != nullptr) {
        __nv_bfloat16* tail = q_latent + (t * s.heads + h) * entry + s.lora;
        tail[a] = y0;
        tail[b] = y1;
      }
    }
  }
}

}  // namespace

void mla_prepare(const __nv_bfloat16* kv, const __nv_bfloat16* kv_norm_weight, float eps, __nv_bfloat16* q,
                 const int32_t* positions, const float* inv_freq, float attention_factor, bool interleaved,
                 const int64_t* slots, __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape shape,
                 cudaStream_t stream) {
  if (shape.tokens == 0 || shape.lora > kThreads * kLatentPerThread) return;  // precondition: lora <= 1024
  launch_dependent(mla_prepare_kernel, static_cast<unsigned>(shape.tokens), kThreads, 0, stream, kv, kv_norm_weight,
                   eps, q, positions, inv_freq, attention_factor, interleaved, slots, cache, q_latent, shape);
}

}  // namespace deepinfer::cuda
