// The step between MLA's projections and its attention, one kernel instead of five: for each new token t
//   cache[slots[t]] = [rms_norm(kv[t, :lora]) * norm_weight | RoPE(kv[t, lora:])]    (the latent cache entry)
//   q[t, h, nope:] = RoPE(q[t, h, nope:])                                            (every head, in place)
//   q_latent[t, h, lora:] = q[t, h, nope:] after RoPE    (the absorbed form's query tail; skipped if null)
// with exactly the arithmetic of rms_norm, rope (same angle, sincosf, attention factor), write_kv_entries and
// the copy it replaces, so results are bit-identical. kv [T, lora + rope] and q [T, heads, nope + rope], each
// token's row `kv_stride` / `q_stride` elements after the last;
// q_latent [T, heads, lora + rope]; slots int64 entry indices; positions int32; lora <= 1024.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

struct MlaPrepareShape {
  int64_t tokens, heads, lora, rope, nope;
  int64_t q_stride;   // elements from one token's q row to the next (heads * (nope + rope) when packed)
  int64_t kv_stride;  // and kv's (lora + rope when packed)
};

void mla_prepare(const __nv_bfloat16* kv, const __nv_bfloat16* kv_norm_weight, float eps, __nv_bfloat16* q,
                 const int32_t* positions, const float* inv_freq, float attention_factor, bool interleaved,
                 const int64_t* slots, __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape shape,
                 cudaStream_t stream);

// mla_prepare, and in the same launch the absorbed queries' latent part, as batched_gemv_transposed computes it:
//   q_latent[t, h, :lora] = q[t, h, :nope] . W_uk[h]     W_uk[h] the [nope, lora] matrix at w_uk + h * w_uk_head_stride
// for at most kLinearGemvMaxRows tokens (linear_gemv.cuh), lora a multiple of 8. The two are independent (q's
// nope part against its rotary tail), so neither waits for the other, and the attention after them waits for
// one kernel instead of two.
void mla_prepare_absorb(const __nv_bfloat16* kv, const __nv_bfloat16* kv_norm_weight, float eps, __nv_bfloat16* q,
                        const int32_t* positions, const float* inv_freq, float attention_factor, bool interleaved,
                        const int64_t* slots, __nv_bfloat16* cache, __nv_bfloat16* q_latent, MlaPrepareShape shape,
                        const __nv_bfloat16* w_uk, int64_t w_uk_head_stride, cudaStream_t stream);

}  // namespace deepinfer::cuda
