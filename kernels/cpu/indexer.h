// DeepSeek-V4.1's compressed KV and sparse indexer on the CPU, the reference forms of kernels/cuda/indexer.cuh
// (same names):
//   compress_pool   gated pooling of a KV-source layer's compressor inputs (compress ratio r > 1): for group g
//                   (positions [g r, g r + r)) and channel d, out[g, d] = sum_j softmax_j(gate[g r + j, d])
//                   kv[g r + j, d], kv and gate read from each position's paged cache entry (at kv_offset and
//                   gate_offset within it; entry j at cache + (block_table[j / 64] * 64 + j % 64) * entry_stride).
//   compress_pool_sequences  the same for several sequences at once: sequence s pools counts[s] groups through its
//                   block table (block_tables + s * max_blocks) into rows offsets[s] + g of `out`; with zero_padding,
//                   rows offsets[s] + g for counts[s] <= g < width are zeroed (a layout of `width` rows a sequence,
//                   the fixed shapes a captured decode step needs), otherwise left alone. With first_groups, row
//                   offsets[s] + g holds group first_groups[s] + g (the groups a step completes, after those
//                   cached).
//   indexer_scores  scores[i, g] = sum_h relu(q[i, h] . keys[g]) * softmax_scale * (weights[i, h] * heads_scale)
//                   for g < visible[i], -inf beyond (the compressed entries row i may not see yet); with
//                   key_offsets, row i's keys start at row key_offsets[i] of `keys` (several sequences' keys side
//                   by side, scores [rows, num_keys] padded with -inf: keys past visible are not read).
//   indexer_head_sum the same scores from precomputed per-head dot products dots[(i heads + h) dots_ld + g] (what
//                   a GEMM of the queries by the keys gives), into scores [rows, width]: -inf from min(visible[i],
//                   num_keys) on.
//   select_topk     per row of scores [rows, n], the indices of its k largest finite scores (ties to the lower
//                   index), ascending, into ids[row * k ...]; counts[row] how many (fewer than k where fewer are
//                   finite).
//   candidate_blocks the candidate source's first level: per row, blocks of block_size scores scored by their best
//                   entry (the block holding the row's newest visible entry always kept: +inf), the topk_blocks
//                   best blocks by select_topk's rule, as a mask [rows, n] of their entries.
//   mask_scores     scores[i] = -inf where mask[i] == 0 (the candidate source's mask on a later index layer).
//   selected_entry_ids per row r, out[r, j] = ids[r, j] + row_bases[r] for j < counts[r], -1 (padding) for the
//                   rest of the row's k slots: select_topk's picks as ids into a batch's compressed entries, each row's
//                   sequence's from its first row (sparse_window_attention skips the padding).
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

void compress_pool(const float* cache, int64_t entry_stride, const int32_t* block_table, int64_t groups, int64_t ratio,
                   int64_t head_dim, int64_t kv_offset, int64_t gate_offset, float* out);

void compress_pool_sequences(const float* cache, int64_t entry_stride, const int32_t* block_tables, int64_t max_blocks,
                             const int32_t* counts, const int64_t* offsets, const int32_t* first_groups,
                             int64_t sequences, int64_t width, int64_t ratio, int64_t head_dim, int64_t kv_offset,
                             int64_t gate_offset, bool zero_padding, float* out);

void indexer_scores(const float* q, const float* weights, const float* keys, const int64_t* key_offsets,
                    const int32_t* visible, int64_t rows,
                    int64_t heads, int64_t dim, int64_t num_keys, float softmax_scale, float heads_scale,
                    float* scores);

void indexer_head_sum(const float* dots, int64_t dots_ld, const float* weights, const int32_t* visible, int64_t rows,
                      int64_t heads, int64_t num_keys, int64_t width, float softmax_scale, float heads_scale,
                      float* scores);

void select_topk(const float* scores, int64_t rows, int64_t n, int64_t k, int32_t* ids, int32_t* counts);

void candidate_blocks(const float* scores, const int32_t* visible, int64_t rows, int64_t n, int64_t topk_blocks,
                      int64_t block_size, uint8_t* mask);

void mask_scores(float* scores, const uint8_t* mask, int64_t n);

void selected_entry_ids(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, const int64_t* row_bases,
                        int32_t* out);

}  // namespace deepinfer::cpu
