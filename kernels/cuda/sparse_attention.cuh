// DeepSeek-V4.1's attention core on the GPU (the CPU form, same name and semantics: kernels/cpu/sparse_attention.h):
// per query row its sliding window of K = V entries from the paged cache plus the compressed entries the indexer
// selected, a per-head sink in the softmax's denominator. The same kernel serves decode (one row per sequence) and
// prefill (every new token a row). head_dim 512 (V4.1's) with 16-byte aligned rows takes a tensor-core kernel (a
// block per row and 16 heads, the row's keys gathered into shared memory, bf16 MMAs, P rounded to bf16 for P . V);
// other widths up to kSparseMaxHeadDim a warp per (row, head) on CUDA cores, in fp32. Keys are bf16 (the FP8
// window and FP4 compressed values are exact in bf16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kSparseMaxHeadDim = 512;

struct SparseWindowKeys {
  const __nv_bfloat16* cache = nullptr;  // one layer: [blocks * 64, entry_stride]
  int64_t entry_stride = 0;
  const int32_t* block_table = nullptr;  // [rows, max_blocks]
  int64_t max_blocks = 0;
  const int32_t* positions = nullptr;    // [rows]
  int64_t window = 0;
  const __nv_bfloat16* extra = nullptr;  // [*, head_dim]
  const int32_t* extra_offsets = nullptr;  // [rows + 1], or null: no extras
  const int32_t* extra_ids = nullptr;    // negative: padding, skipped
};

void sparse_window_attention(const __nv_bfloat16* q, const SparseWindowKeys& keys, const float* sinks, int64_t rows,
                             int64_t heads, int64_t head_dim, float scale, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
