// MLA attention on the CPU, the reference forms of kernels/cuda/mla_decode.cuh and mla_prefill.cuh under the
// same names and argument order (less the GPU's workspace, splits, tiles and stream). fp32, OpenMP over
// (row, head).
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// Absorbed form on a paged cache: for each query row b and head h,
//   out[b, h, :] = sum_{j < seq_lens[b]} softmax_j(scale * q[b, h, :] . cache_j) * cache_j[:latent]
// q [rows, heads, latent + rope] (W_uk^T q_nope | q_pe); cache_j = cache + (block_table[b, j / 64] * 64 + j % 64)
// * (latent + rope), block_table [rows, max_blocks_per_seq]; out [rows, heads, latent].
void mla_decode_attention(const float* q, const float* cache, const int32_t* block_table, int64_t max_blocks_per_seq,
                          const int32_t* seq_lens, int64_t rows, int64_t heads, int64_t latent, int64_t rope,
                          float scale, float* out);

// Expanded form, causal over variable-length sequences: query row r (of sequence q_seq[r], at position
// q_pos[r]) attends keys [cu_k[s], cu_k[s] + q_pos[r]] of its sequence s:
//   score_j = scale * (q_nope . kv[j, h, :nope] + q_pe . k_pe[j]),  out[r, h, :] = sum_j softmax_j * kv[j, h, nope:]
// q [rows, heads, nope + rope]; kv [keys, heads, nope + v_dim]; k_pe row j at k_pe + j * k_pe_stride (rope
// values, shared by the heads); out [rows, heads, v_dim].
void mla_prefill_attention(const float* q, const float* kv, const float* k_pe, int64_t k_pe_stride,
                           const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, int64_t rows,
                           int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, float scale, float* out);

}  // namespace deepinfer::cpu
