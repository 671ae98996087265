#include "kernels/cpu/mla_attention.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer::cpu {

namespace {
constexpr int64_t kBlockSize = 64;  // tokens per cache block, as the CUDA kernels and the engine's caches
}

void mla_decode_attention(const float* q, const float* cache, const int32_t* block_table, int64_t max_blocks_per_seq,
                          const int32_t* seq_lens, int64_t rows, int64_t heads, int64_t latent, int64_t rope,
                          float scale, float* out) {
  const int64_t dim = latent + rope;
#pragma omp parallel for collapse(2) schedule(static) if (rows * heads > 16)
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t len = seq_lens[b];
      const int32_t* table = block_table + b * max_blocks_per_seq;
      auto entry = [&](int64_t j) { return cache + (table[j / kBlockSize] * kBlockSize + j % kBlockSize) * dim; };
      const float* qh = q + (b * heads + h) * dim;
      std::vector<float> scores(len);
      for (int64_t j = 0; j < len; ++j) {
        const float* e = entry(j);
        float s = 0.0f;
        for (int64_t k = 0; k < latent; ++k) s += qh[k] * e[k];
        for (int64_t k = 0; k < rope; ++k) s += qh[latent + k] * e[latent + k];
        scores[j] = s * scale;
      }
      softmax(scores.data(), len);
      float* o = out + (b * heads + h) * latent;
      std::fill_n(o, latent, 0.0f);
      for (int64_t j = 0; j < len; ++j) axpy(scores[j], entry(j), o, latent);
    }
  }
}

void mla_prefill_attention(const float* q, const float* kv, const float* k_pe, int64_t k_pe_stride,
                           const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, int64_t rows,
                           int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, float scale, float* out) {
  const int64_t qk = nope + rope, kv_row = nope + v_dim;
#pragma omp parallel for collapse(2) schedule(static) if (rows * heads > 16)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t first = cu_k[q_seq[r]], visible = q_pos[r] + 1;  // causal: positions [0, own position]
      const float* q_nope = q + (r * heads + h) * qk;
      const float* q_pe = q_nope + nope;
      std::vector<float> scores(visible);
      for (int64_t j = 0; j < visible; ++j) {
        const float* k_nope = kv + ((first + j) * heads + h) * kv_row;
        const float* pe = k_pe + (first + j) * k_pe_stride;
        float s = 0.0f;
        for (int64_t k = 0; k < nope; ++k) s += q_nope[k] * k_nope[k];
        for (int64_t k = 0; k < rope; ++k) s += q_pe[k] * pe[k];
        scores[j] = s * scale;
      }
      softmax(scores.data(), visible);
      float* o = out + (r * heads + h) * v_dim;
      std::fill_n(o, v_dim, 0.0f);
      for (int64_t j = 0; j < visible; ++j) axpy(scores[j], kv + ((first + j) * heads + h) * kv_row + nope, o, v_dim);
    }
  }
}

}  // namespace deepinfer::cpu
