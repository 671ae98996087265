// DeepSeek-V4.1's hyper-connections on the GPU (the CPU forms, same names: kernels/cpu/hyper_connections.h). The
// residual streams stay fp32 on the device, [T, hc, H]; the sublayers read bf16.
//   hc_embed              elementwise: every stream of token t = the bf16 embedding row of ids[t], as fp32; the
//                         first collapse weights pre[t] = (1, 0, ...)
//   hc_flat_rms_norm      one block per token: flat[t] = streams[t] / rms over hc * H values, bf16 (the mixes'
//                         projection then runs as a Linear with fp32 output)
//   hc_mixes              one thread per token: pre, post and the Sinkhorn-normalised comb from the mixes
//   hc_collapse_rms_norm  one block per token: h[t] = rms_norm(sum_j pre[t, j] streams[t, j]) * weight, bf16; the
//                         collapsed row in shared memory (hidden <= kHcMaxHidden)
//   hc_post               elementwise: streams[t, k] = sum_j comb[t, j, k] streams[t, j] + post[t, k] out[t]
//   hc_collapse           elementwise: out[t] = sum_j pre[t, j] streams[t, j], bf16 rows out_stride apart; pre null:
//                         the mean over the streams (DeepSeek-V4.1's DSpark features)
//   hc_site               one site in one launch: with out non-null first hc_post of the previous sublayer (its
//                         post and comb as they come in, the streams rewritten), then hc_flat_rms_norm, the
//                         mixes' projection by fn, hc_mixes (into next_pre, post and comb) and hc_collapse_rms_norm
//                         by pre. Not bit for bit the chain: the flat streams are not rounded to bf16 before the
//                         projection (the CPU form does not round them either). hc <= kHcSiteMaxStreams, hidden a
//                         multiple of 8 (hc_site_supports); streams, out, fn 16-byte aligned.
//   hc_head_weights       elementwise: pre[t, j] = sigmoid(mixes[t, j] scale[0] + base[j]) + hc_eps (the DSpark
//                         head's collapse weights, from its hc_head_fn mixes)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kHcMaxStreams = 8;
constexpr int64_t kHcMaxHidden = 12288;  // the collapsed row in 48 KB of shared memory
constexpr int64_t kHcSiteMaxStreams = 4;  // hc_site's instances (V4.1 has 4)

// One site's weights: the mixes' projection, its base and scales, and the sublayer's RMSNorm weight.
struct HcSiteWeights {
  const __nv_bfloat16* fn;    // [(2 + hc) * hc, hc * hidden]
  const float* base;          // [(2 + hc) * hc]
  const float* scale;         // [3]
  const __nv_bfloat16* norm;  // [hidden]
};

void hc_embed(const __nv_bfloat16* table, const int32_t* ids, int64_t tokens, int64_t hc, int64_t hidden,
              float* streams, float* pre, cudaStream_t stream);
void hc_flat_rms_norm(const float* streams, int64_t tokens, int64_t d, float eps, __nv_bfloat16* flat,
                      cudaStream_t stream);
void hc_mixes(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc, float hc_eps,
              int64_t sinkhorn_iters, float* pre, float* post, float* comb, cudaStream_t stream);
void hc_collapse_rms_norm(const float* streams, const float* pre, const __nv_bfloat16* weight, int64_t tokens,
                          int64_t hc, int64_t hidden, float eps, __nv_bfloat16* h, cudaStream_t stream);
void hc_post(float* streams, const __nv_bfloat16* out, const float* post, const float* comb, int64_t tokens,
             int64_t hc, int64_t hidden, cudaStream_t stream);
void hc_collapse(const float* streams, const float* pre, int64_t tokens, int64_t hc, int64_t hidden,
                 __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream);
bool hc_site_supports(int64_t hc, int64_t hidden);
void hc_site(float* streams, const __nv_bfloat16* out, const float* pre, const HcSiteWeights& w, int64_t tokens,
             int64_t hc, int64_t hidden, float eps, float hc_eps, int64_t sinkhorn_iters, float* next_pre, float* post,
             float* comb, __nv_bfloat16* h, cudaStream_t stream);
void hc_head_weights(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc,
                     float hc_eps, float* pre, cudaStream_t stream);

}  // namespace deepinfer::cuda
