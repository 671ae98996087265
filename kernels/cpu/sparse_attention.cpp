#include "kernels/cpu/sparse_attention.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer::cpu {

namespace {
constexpr int64_t kBlockSize = 64;  // tokens per cache block, as the engine's caches
}

void sparse_window_attention(const float* q, const SparseWindowKeys& k, const float* sinks, int64_t rows,
                             int64_t heads, int64_t head_dim, float scale, float* out) {
#pragma omp parallel for schedule(static) if (rows * heads > 16)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = k.positions[r];
    std::vector<const float*> keys;
    const int64_t floor = k.window_floors != nullptr ? k.window_floors[r] : 0;
    for (int64_t j = std::max<int64_t>(floor, p - k.window + 1); j <= p; ++j) {
      const int64_t block = k.block_table[r * k.max_blocks + j / kBlockSize];
      keys.push_back(k.cache + (block * kBlockSize + j % kBlockSize) * k.entry_stride);
    }
    if (k.extra_offsets != nullptr)
      for (int64_t i = k.extra_offsets[r]; i < k.extra_offsets[r + 1]; ++i)
        if (k.extra_ids[i] >= 0) keys.push_back(k.extra + static_cast<int64_t>(k.extra_ids[i]) * head_dim);
    std::vector<float> logits(keys.size() + 1);
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + (r * heads + h) * head_dim;
      for (size_t j = 0; j < keys.size(); ++j) {
        float dot = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) dot += qh[d] * keys[j][d];
        logits[j] = dot * scale;
      }
      logits.back() = sinks[h];  // the sink only adds to the denominator
      softmax(logits.data(), static_cast<int64_t>(logits.size()));
      float* o = out + (r * heads + h) * head_dim;
      std::fill_n(o, head_dim, 0.0f);
      for (size_t j = 0; j < keys.size(); ++j) axpy(logits[j], keys[j], o, head_dim);
    }
  }
}

}  // namespace deepinfer::cpu
