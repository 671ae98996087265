// DeepSeek-V4.1's attention core on the GPU (the CPU form, same name and semantics: kernels/cpu/sparse_attention.h):
// per query row its sliding window of K = V entries from the paged FP8 window cache (e4m3 codes with a ue8m0 scale
// per 32 values, kernels/cuda/kv_cache.cuh's write_fp8_kv_rows) plus the compressed entries the indexer selected
// (bf16: their FP4 values are exact in it), a per-head sink in the softmax's denominator. The same kernel serves
// decode (one row per sequence) and prefill (every new token a row). head_dim 512 (V4.1's) takes a tensor-core
// kernel: a block per row and 16 heads, the row's keys gathered into shared memory (window codes decoded to bf16
// there, exactly), bf16 MMAs, P rounded to bf16 for P . V. Other widths (multiples of 32 up to kSparseMaxHeadDim)
// take a warp per (row, head) on CUDA cores, in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kSparseMaxHeadDim = 512;

struct SparseWindowKeys {
  const uint8_t* window_codes = nullptr;   // one layer: [blocks * 64, head_dim] e4m3
  const uint8_t* window_scales = nullptr;  // [blocks * 64, head_dim / 32] ue8m0
  const int32_t* block_table = nullptr;    // [rows, max_blocks]
  int64_t max_blocks = 0;
  const int32_t* positions = nullptr;    // [rows]
  int64_t window = 0;
  const __nv_bfloat16* extra = nullptr;  // [*, head_dim]
  const int32_t* extra_offsets = nullptr;  // [rows + 1], or null: no extras
  const int32_t* extra_ids = nullptr;    // negative: padding, skipped
  // [rows]: no window key before this position (V4.1's bounded decoder replay), or null: none.
  const int32_t* window_floors = nullptr;
};

void sparse_window_attention(const __nv_bfloat16* q, const SparseWindowKeys& keys, const float* sinks, int64_t rows,
                             int64_t heads, int64_t head_dim, float scale, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
