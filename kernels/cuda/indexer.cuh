// DeepSeek-V4.1's compressed KV and sparse indexer on the GPU (the CPU forms, same names and semantics:
// kernels/cpu/indexer.h).
//   compress_pool_sequences  a block per (group, sequence), a thread per channel: the softmax over the group's r
//                   gate values, then the weighted sum of its kv values, from the paged bf16 cache; bf16 out. Every
//                   sequence of a step in one launch of `width` groups each (the counts and offsets on the device,
//                   so a captured decode step replays for any context within its block tables).
//   indexer_scores  a block per (query row, 64 compressed keys), a warp per key, the row's queries in shared memory
//                   (heads * dim <= kIndexerMaxQueryFloats); fp32 scores, -inf past the row's visible entries (not
//                   read); with key_offsets, each row's keys from its own offset (several sequences in one launch).
//   indexer_head_sum the indexer's scores from the per-head dot products a GEMM computed (prefill: q [rows x heads,
//                   dim] . keys^T on the tensor cores): a thread per (row, entry), the heads' relu'd dots weighted and
//                   summed; dots [rows * heads, num_keys] rows dots_ld apart, scores [rows, width] (-inf from
//                   min(visible, num_keys) on).
//   select_topk     a block per row: a radix select over the scores' order-preserving bits finds the k-th largest
//                   finite score, then block scans over the row in index order keep every larger score and the
//                   lowest-index ties, and write the kept indices ascending (the CPU's partial sort's set).
//   candidate_blocks the candidate source's first level: block scores (a thread a block), select_topk over them,
//                   then the mask of the kept blocks' entries; the block scores and picks in caller workspace.
//   mask_scores     elementwise: scores[i] = -inf where mask[i] == 0 (the candidate source's mask on a later index layer).
//   selected_entry_ids a thread per slot: per row r, out[r, j] = ids[r, j] + row_bases[r] for j < counts[r], -1
//                   (padding) for the rest of the row's k slots: select_topk's picks as ids into a batch's concatenated compressed entries
//                   (sparse_window_attention skips the padding).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kIndexerMaxQueryFloats = 12288;  // 48 KB of shared memory
constexpr int64_t kIndexerMaxDim = 256;

void compress_pool_sequences(const __nv_bfloat16* cache, int64_t entry_stride, const int32_t* block_tables,
                             int64_t max_blocks, const int32_t* counts, const int64_t* offsets,
                             const int32_t* first_groups, int64_t sequences, int64_t width, int64_t ratio,
                             int64_t head_dim, int64_t kv_offset, int64_t gate_offset, bool zero_padding,
                             __nv_bfloat16* out, cudaStream_t stream);

void indexer_scores(const __nv_bfloat16* q, const float* weights, const __nv_bfloat16* keys,
                    const int64_t* key_offsets, const int32_t* visible,
                    int64_t rows, int64_t heads, int64_t dim, int64_t num_keys, float softmax_scale,
                    float heads_scale, float* scores, cudaStream_t stream);

void indexer_head_sum(const float* dots, int64_t dots_ld, const float* weights, const int32_t* visible, int64_t rows,
                      int64_t heads, int64_t num_keys, int64_t width, float softmax_scale, float heads_scale,
                      float* scores, cudaStream_t stream);

void select_topk(const float* scores, int64_t rows, int64_t n, int64_t k, int32_t* ids, int32_t* counts,
                 cudaStream_t stream);

// block_scores [rows, ceil(n / block_size)], block_ids [rows, topk_blocks], block_counts [rows]: workspace.
void candidate_blocks(const float* scores, const int32_t* visible, int64_t rows, int64_t n, int64_t topk_blocks,
                      int64_t block_size, float* block_scores, int32_t* block_ids, int32_t* block_counts,
                      uint8_t* mask, cudaStream_t stream);

void mask_scores(float* scores, const uint8_t* mask, int64_t n, cudaStream_t stream);

void selected_entry_ids(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, const int64_t* row_bases,
                        int32_t* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
