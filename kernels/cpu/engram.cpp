#include "kernels/cpu/engram.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::cpu {

void engram_gather(const float* table, const int64_t* rows, int64_t tokens, int64_t columns, int64_t row_dim,
                   float* gathered) {
  for (int64_t r = 0; r < tokens * columns; ++r) std::copy_n(table + rows[r] * row_dim, row_dim, gathered + r * row_dim);
}

void engram_mix(float* streams, const float* kv, const float* q_weight, const float* k_weight, int64_t tokens,
                int64_t hc, int64_t hidden, float eps) {
  const int64_t H = hidden;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* value = kv + (t * (hc + 1) + hc) * H;
    for (int64_t j = 0; j < hc; ++j) {
      float* h = streams + (t * hc + j) * H;
      const float* key = kv + (t * (hc + 1) + j) * H;
      const float* q = q_weight + j * H;
      const float* k = k_weight + j * H;
      double hh = 0.0, kk = 0.0, dot = 0.0;
      for (int64_t d = 0; d < H; ++d) {
        hh += static_cast<double>(h[d]) * h[d];
        kk += static_cast<double>(key[d]) * key[d];
        dot += static_cast<double>(h[d]) * (static_cast<double>(q[d]) * k[d]) * key[d];
      }
      const double scaled =
          dot / (std::sqrt(hh / H + eps) * std::sqrt(kk / H + eps) * std::sqrt(static_cast<double>(H)));
      const double root = std::copysign(std::sqrt(std::max(std::abs(scaled), 1e-6)), scaled);
      const auto gate = static_cast<float>(1.0 / (1.0 + std::exp(-root)));
      for (int64_t d = 0; d < H; ++d) h[d] += gate * value[d];
    }
  }
}

}  // namespace deepinfer::cpu
