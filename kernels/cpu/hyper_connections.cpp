#include "kernels/cpu/hyper_connections.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer::cpu {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void hc_embed(const float* table, const int32_t* ids, int64_t tokens, int64_t hc, int64_t hidden, float* streams,
              float* pre) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < hc; ++j) {
      std::copy_n(table + static_cast<int64_t>(ids[t]) * hidden, hidden, streams + (t * hc + j) * hidden);
      pre[t * hc + j] = j == 0 ? 1.0f : 0.0f;
    }
}

void hc_flat_rms_norm(const float* streams, int64_t tokens, int64_t d, float eps, float* flat) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = streams + t * d;
    double sum = 0.0;
    for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(d)) + eps);
    for (int64_t i = 0; i < d; ++i) flat[t * d + i] = x[i] * inv;
  }
}

void hc_mixes(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc, float hc_eps,
              int64_t sinkhorn_iters, float* pre, float* post, float* comb) {
  const int64_t M = (2 + hc) * hc;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* m = mixes + t * M;
    for (int64_t j = 0; j < hc; ++j) {
      pre[t * hc + j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps;
      post[t * hc + j] = 2.0f * sigmoid(m[hc + j] * scale[1] + base[hc + j]);
    }
    float* c = comb + t * hc * hc;  // c[j * hc + k]: from stream j into stream k
    for (int64_t i = 0; i < hc * hc; ++i) c[i] = m[2 * hc + i] * scale[2] + base[2 * hc + i];
    auto normalize_rows = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t k = 0; k < hc; ++k) sum += c[j * hc + k];
        for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= sum + hc_eps;
      }
    };
    auto normalize_columns = [&] {
      for (int64_t k = 0; k < hc; ++k) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
        for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= sum + hc_eps;
      }
    };
    for (int64_t j = 0; j < hc; ++j) {
      softmax(c + j * hc, hc);
      for (int64_t k = 0; k < hc; ++k) c[j * hc + k] += hc_eps;
    }
    normalize_columns();
    for (int64_t it = 0; it + 1 < sinkhorn_iters; ++it) {
      normalize_rows();
      normalize_columns();
    }
  }
}

void hc_collapse(const float* streams, const float* pre, int64_t tokens, int64_t hc, int64_t hidden,
                 float* collapsed) {
  std::fill_n(collapsed, tokens * hidden, 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < hc; ++j)
      axpy(pre != nullptr ? pre[t * hc + j] : 1.0f / static_cast<float>(hc), streams + (t * hc + j) * hidden,
           collapsed + t * hidden, hidden);
}

void hc_head_weights(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc,
                     float hc_eps, float* pre) {
  for (int64_t i = 0; i < tokens * hc; ++i)
    pre[i] = 1.0f / (1.0f + std::exp(-(mixes[i] * scale[0] + base[i % hc]))) + hc_eps;
}

void hc_collapse_rms_norm(const float* streams, const float* pre, const float* weight, int64_t tokens, int64_t hc,
                          int64_t hidden, float eps, float* h) {
  std::vector<float> collapsed(tokens * hidden);
  hc_collapse(streams, pre, tokens, hc, hidden, collapsed.data());
  rms_norm(collapsed.data(), weight, h, tokens, hidden, eps);
}

void hc_post(float* streams, const float* out, const float* post, const float* comb, int64_t tokens, int64_t hc,
             int64_t hidden) {
  std::vector<float> mixed(hc * hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    float* s = streams + t * hc * hidden;
    std::fill(mixed.begin(), mixed.end(), 0.0f);
    for (int64_t k = 0; k < hc; ++k) {
      for (int64_t j = 0; j < hc; ++j) axpy(comb[(t * hc + j) * hc + k], s + j * hidden, mixed.data() + k * hidden, hidden);
      axpy(post[t * hc + k], out + t * hidden, mixed.data() + k * hidden, hidden);
    }
    std::copy(mixed.begin(), mixed.end(), s);
  }
}

void hc_site(float* streams, const float* out, const float* pre, const float* fn, const float* base,
             const float* scale, const float* norm, int64_t tokens, int64_t hc, int64_t hidden, float eps,
             float hc_eps, int64_t sinkhorn_iters, float* next_pre, float* post, float* comb, float* h) {
  const int64_t D = hc * hidden, M = (2 + hc) * hc;
  if (out != nullptr) hc_post(streams, out, post, comb, tokens, hc, hidden);
  std::vector<float> flat(tokens * D), mixes(tokens * M);
  hc_flat_rms_norm(streams, tokens, D, eps, flat.data());
  linear(flat.data(), fn, nullptr, mixes.data(), tokens, M, D);
  hc_mixes(mixes.data(), base, scale, tokens, hc, hc_eps, sinkhorn_iters, next_pre, post, comb);
  hc_collapse_rms_norm(streams, pre, norm, tokens, hc, hidden, eps, h);
}

}  // namespace deepinfer::cpu
