// DeepSeek-V4.1's hyper-connections on the CPU, the reference forms of kernels/cuda/hyper_connections.cuh under
// the same names. The residual is hc streams of `hidden` values per token, streams [T, hc, H] fp32. Around each
// sublayer (attention, then the MoE) the model
//   1. normalises each token's flattened streams (hc_flat_rms_norm: RMS over all hc * H values, no weight);
//   2. projects them to (2 + hc) * hc mixes with the site's fn (a Linear, [(2 + hc) * hc, hc * H]);
//   3. turns the mixes into the collapse weights pre [T, hc], the output weights post [T, hc] and the stream mix
//      comb [T, hc, hc] (hc_mixes: sigmoids, and a Sinkhorn normalisation of comb's row softmaxes);
//   4. collapses the streams to the sublayer's input and normalises it (hc_collapse_rms_norm);
//   5. after the sublayer, writes back: streams[t, k] = post[t, k] out[t] + sum_j comb[t, j, k] streams[t, j]
//      (hc_post).
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// The streams at the embedding: streams[t, j] = table[ids[t]] for every j, and the first collapse weights pre[t] =
// (1, 0, ..., 0) (the first sublayer reads stream 0).
void hc_embed(const float* table, const int32_t* ids, int64_t tokens, int64_t hc, int64_t hidden, float* streams,
              float* pre);

// flat[t, :] = streams[t, :] / sqrt(mean(streams[t, :]^2) + eps) over d = hc * H values (sum in double).
void hc_flat_rms_norm(const float* streams, int64_t tokens, int64_t d, float eps, float* flat);

// From mixes [T, (2 + hc) * hc] with the site's base [(2 + hc) * hc] and scale [3]:
//   pre[t, j]  = sigmoid(m[j] scale[0] + base[j]) + hc_eps
//   post[t, j] = 2 sigmoid(m[hc + j] scale[1] + base[hc + j])
//   comb[t]    = each row j of (m[2hc + j hc + k] scale[2] + base[...]) softmaxed, + hc_eps, then columns
//                normalised, then (rows, columns) normalised sinkhorn_iters - 1 more times (x / (sum + hc_eps)).
void hc_mixes(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc, float hc_eps,
              int64_t sinkhorn_iters, float* pre, float* post, float* comb);

// collapsed[t] = sum_j pre[t, j] streams[t, j] (j in order, from zero); pre null: every weight 1 / hc (the mean).
void hc_collapse(const float* streams, const float* pre, int64_t tokens, int64_t hc, int64_t hidden, float* collapsed);
// The DSpark head's collapse weights from its mixes [T, hc]: pre[t, j] = sigmoid(mixes[t, j] scale[0] + base[j]) +
// hc_eps.
void hc_head_weights(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc,
                     float hc_eps, float* pre);
// h[t] = rms_norm(collapsed[t]) * weight.
void hc_collapse_rms_norm(const float* streams, const float* pre, const float* weight, int64_t tokens, int64_t hc,
                          int64_t hidden, float eps, float* h);

// streams[t, k] = sum_j comb[t, j, k] streams[t, j] + post[t, k] out[t] (in that order), in place.
void hc_post(float* streams, const float* out, const float* post, const float* comb, int64_t tokens, int64_t hc,
             int64_t hidden);

// One site, steps 5 (of the previous sublayer) and 1-4 (the CUDA form runs them in one launch): with out non-null
// first hc_post(streams, out, post, comb) with post and comb as they come in; then the mixes of fn [(2 + hc) * hc,
// hc * hidden], base and scale into next_pre, post and comb (overwritten), and h = hc_collapse_rms_norm(streams, pre,
// norm).
void hc_site(float* streams, const float* out, const float* pre, const float* fn, const float* base,
             const float* scale, const float* norm, int64_t tokens, int64_t hc, int64_t hidden, float eps,
             float hc_eps, int64_t sinkhorn_iters, float* next_pre, float* post, float* comb, float* h);

}  // namespace deepinfer::cpu
