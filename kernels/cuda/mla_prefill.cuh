// MLA prefill attention in the expanded form, causal over a variable-length batch. For query row r (of
// sequence q_seq[r], at position q_pos[r] within it) and head h:
//   o[r, h, :] = sum_{j <= q_pos[r]} softmax_j(scale * (q_nope . k_nope_j + q_pe . k_pe_j)) * v_j
// with q [Tq, H, nope + rope], kv [Tk, H, nope + v] (kv_b applied to the latents), k_pe rows k_pe_stride apart, and the
// keys of sequence s at rows [cu_k[s], cu_k[s + 1]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void mla_prefill_attention(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                           int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, int64_t num_q_rows,
                           int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, float scale, __nv_bfloat16* out,
                           cudaStream_t stream);

}  // namespace deepinfer::cuda
