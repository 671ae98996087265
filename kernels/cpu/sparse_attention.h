// DeepSeek-V4.1's attention core on the CPU, the reference form of kernels/cuda/sparse_attention.cuh (same name):
// one shared K = V row per key (every head reads the same keys), a per-head sink logit in the softmax's
// denominator, and per query row two sets of keys, in this order:
//   - the window: positions [max(0, p - window + 1), p] of the row's sequence, from a paged cache whose entry j
//     is at cache + (block_table[r, j / 64] * 64 + j % 64) * entry_stride (the first head_dim values are K = V);
//   - the selected extras: rows extra_ids[extra_offsets[r] .. extra_offsets[r + 1]) of `extra` [*, head_dim]
//     (negative ids are padding and skipped: a fixed k slots a row, fewer of them selected)
//     (the compressed entries the indexer picked), in the order given.
//   out[r, h] = sum_j softmax_j([scale q[r, h] . k_j ; sink[h]]) k_j   (the sink's share has no value)
// q [rows, heads, head_dim]; out [rows, heads, head_dim]. fp32.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

struct SparseWindowKeys {
  const float* cache = nullptr;
  int64_t entry_stride = 0;
  const int32_t* block_table = nullptr;  // [rows, max_blocks]
  int64_t max_blocks = 0;
  const int32_t* positions = nullptr;    // [rows]: the row's own position p
  int64_t window = 0;
  const float* extra = nullptr;          // may be null with no extras
  const int32_t* extra_offsets = nullptr;  // [rows + 1], or null: no extras
  const int32_t* extra_ids = nullptr;
  // [rows]: no window key before this position (V4.1's bounded decoder replay, mask mode), or null: none.
  const int32_t* window_floors = nullptr;
};

void sparse_window_attention(const float* q, const SparseWindowKeys& keys, const float* sinks, int64_t rows,
                             int64_t heads, int64_t head_dim, float scale, float* out);

}  // namespace deepinfer::cpu
