#include "kernels/cpu/indexer.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer::cpu {

namespace {
constexpr int64_t kBlockSize = 64;  // tokens per cache block, as the engine's caches
}

void compress_pool(const float* cache, int64_t entry_stride, const int32_t* block_table, int64_t groups, int64_t ratio,
                   int64_t head_dim, int64_t kv_offset, int64_t gate_offset, float* out) {
  auto entry = [&](int64_t j) { return cache + (block_table[j / kBlockSize] * kBlockSize + j % kBlockSize) * entry_stride; };
  std::vector<float> weights(ratio);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t d = 0; d < head_dim; ++d) {
      for (int64_t j = 0; j < ratio; ++j) weights[j] = entry(g * ratio + j)[gate_offset + d];
      softmax(weights.data(), ratio);
      float sum = 0.0f;
      for (int64_t j = 0; j < ratio; ++j) sum += weights[j] * entry(g * ratio + j)[kv_offset + d];
      out[g * head_dim + d] = sum;
    }
}

void compress_pool_sequences(const float* cache, int64_t entry_stride, const int32_t* block_tables, int64_t max_blocks,
                             const int32_t* counts, const int64_t* offsets, const int32_t* first_groups,
                             int64_t sequences, int64_t width, int64_t ratio, int64_t head_dim, int64_t kv_offset,
                             int64_t gate_offset, bool zero_padding, float* out) {
  for (int64_t s = 0; s < sequences; ++s) {
    float* rows = out + offsets[s] * head_dim;
    const int64_t first = first_groups != nullptr ? first_groups[s] : 0;
    std::vector<float> pooled((first + counts[s]) * head_dim);  // every group up to the last, the first skipped
    compress_pool(cache, entry_stride, block_tables + s * max_blocks, first + counts[s], ratio, head_dim, kv_offset,
                  gate_offset, pooled.data());
    std::copy(pooled.begin() + first * head_dim, pooled.end(), rows);
    if (zero_padding) std::fill(rows + counts[s] * head_dim, rows + width * head_dim, 0.0f);
  }
}

void indexer_scores(const float* q, const float* weights, const float* keys, const int64_t* key_offsets,
                    const int32_t* visible, int64_t rows,
                    int64_t heads, int64_t dim, int64_t num_keys, float softmax_scale, float heads_scale,
                    float* scores) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) if (rows * num_keys > 1024)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t g = 0; g < num_keys; ++g) {
      if (g >= visible[i]) {
        scores[i * num_keys + g] = kNegInf;
        continue;
      }
      float total = 0.0f;
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q + (i * heads + h) * dim;
        const float* k = keys + ((key_offsets != nullptr ? key_offsets[i] : 0) + g) * dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < dim; ++d) dot += qh[d] * k[d];
        total += std::max(dot, 0.0f) * softmax_scale * (weights[i * heads + h] * heads_scale);
      }
      scores[i * num_keys + g] = total;
    }
}

void indexer_head_sum(const float* dots, int64_t dots_ld, const float* weights, const int32_t* visible, int64_t rows,
                      int64_t heads, int64_t num_keys, int64_t width, float softmax_scale, float heads_scale,
                      float* scores) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t g = 0; g < width; ++g) {
      float& score = scores[i * width + g];
      if (g >= visible[i] || g >= num_keys) {
        score = -std::numeric_limits<float>::infinity();
        continue;
      }
      score = 0.0f;
      for (int64_t h = 0; h < heads; ++h)
        score += std::max(dots[(i * heads + h) * dots_ld + g], 0.0f) * softmax_scale * (weights[i * heads + h] * heads_scale);
    }
}

void select_topk(const float* scores, int64_t rows, int64_t n, int64_t k, int32_t* ids, int32_t* counts) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<int64_t> order(n);
  std::vector<char> taken(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = scores + r * n;
    std::iota(order.begin(), order.end(), 0);
    const int64_t keep = std::min(k, n);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
      return s[a] > s[b] || (s[a] == s[b] && a < b);
    });
    std::fill(taken.begin(), taken.end(), 0);
    for (int64_t j = 0; j < keep; ++j)
      if (s[order[j]] > kNegInf) taken[order[j]] = 1;
    int32_t count = 0;
    for (int64_t g = 0; g < n; ++g)
      if (taken[g]) ids[r * k + count++] = static_cast<int32_t>(g);
    counts[r] = count;
  }
}

void candidate_blocks(const float* scores, const int32_t* visible, int64_t rows, int64_t n, int64_t topk_blocks,
                      int64_t block_size, uint8_t* mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t num_blocks = (n + block_size - 1) / block_size;
  std::vector<float> block_score(num_blocks);
  std::vector<int32_t> ids(topk_blocks);
  int32_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(block_score.begin(), block_score.end(), kNegInf);
    for (int64_t i = 0; i < n; ++i)
      block_score[i / block_size] = std::max(block_score[i / block_size], scores[r * n + i]);
    const int64_t v = visible[r];
    const int64_t last = v > 0 ? (v - 1) / block_size : -1;
    if (last >= 0 && last < num_blocks) block_score[last] = std::numeric_limits<float>::infinity();
    select_topk(block_score.data(), 1, num_blocks, topk_blocks, ids.data(), &count);
    std::fill_n(mask + r * n, n, uint8_t{0});
    for (int32_t j = 0; j < count; ++j)
      for (int64_t e = ids[j] * block_size; e < std::min(n, (ids[j] + 1) * block_size); ++e) mask[r * n + e] = 1;
  }
}

void mask_scores(float* scores, const uint8_t* mask, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (mask[i] == 0) scores[i] = -std::numeric_limits<float>::infinity();
}

void selected_entry_ids(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, const int64_t* row_bases,
                        int32_t* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j)
      out[r * k + j] = j < counts[r] ? static_cast<int32_t>(ids[r * k + j] + row_bases[r]) : -1;
}

}  // namespace deepinfer::cpu
