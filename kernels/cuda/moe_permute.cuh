// Token permutation around the routed experts. Each (token t, choice k) becomes one row of an
// expert-sorted buffer: rows of expert 0 first, then expert 1, ... , each expert's rows in (t, k) order
// (a stable radix sort, so the layout is deterministic).
//   moe_permute:   expert_offsets [E + 1], x_perm [T*K, H] = x[t], row_of [T*K] = row of (t, k)
//   moe_unpermute: out[t] += sum_k w[t, k] * y_perm[row_of[t*K + k]]  (k in order)
// Workspace: moe_permute_workspace_bytes(T*K, E) bytes, from the caller.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

size_t moe_permute_workspace_bytes(int64_t num_rows, int64_t num_experts);

// ids [n] of logical experts (num_experts and above: served elsewhere) -> places of a store holding fewer:
// out[i] = places[ids[i]] for ids[i] < num_experts (places gives `elsewhere` for experts not held), else
// `elsewhere`. The CPU form: cpu::remap_expert_ids (kernels/cpu/moe.h).
void remap_expert_ids(const int32_t* ids, int64_t n, const int32_t* places, int64_t num_experts, int32_t elsewhere,
                      int32_t* out, cudaStream_t stream);

// copied_experts >= 0: only the rows of experts below it are copied into x_perm (the others, entries served on
// another rank under expert parallelism, keep their row_of and offsets and are left unwritten). x_perm null: no row
// is copied (row_of and expert_offsets only; moe_pad_sources then says where each padded row's x row is).
void moe_permute(const __nv_bfloat16* x, const int32_t* topk_ids, int64_t num_tokens, int64_t top_k, int64_t hidden,
                 int64_t num_experts, __nv_bfloat16* x_perm, int32_t* row_of, int32_t* expert_offsets,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream, int64_t copied_experts = -1);

// dst[dst_rows[i]] += src[src_rows[i]] for i < n (bf16 rows, fp32 sum; dst_rows distinct). A rank slice's combine
// (moe/device_rank_slice.h). The CPU form: cpu::add_rows_at (kernels/cpu/moe.h).
void add_rows_at(const __nv_bfloat16* src, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, int64_t hidden,
                 __nv_bfloat16* dst, cudaStream_t stream);

// dst[i] = src[src_rows[i]] for i < n (bf16 rows): the expert outputs of each (token, k) entry, unweighted, in (t, k)
// order (--batch-invariant's expert parallelism returns them so that the sum is the one-rank moe_unpermute's). The
// CPU form: cpu::gather_rows (kernels/cpu/moe.h).
void gather_rows(const __nv_bfloat16* src, const int32_t* src_rows, int64_t n, int64_t hidden, __nv_bfloat16* dst,
                 cudaStream_t stream);

// The decode layout without moving x: the expert_offsets and row_of that moe_permute computes (the same stable
// order), and token_of_row [T*K]: the token whose x row the permuted row r stands for. One single-block kernel
// (moe_permute takes five launches and a copy of x), for up to kMoeRouteMaxRows = T*K and kMoeRouteMaxExperts.
inline constexpr int64_t kMoeRouteMaxRows = 4096;
inline constexpr int64_t kMoeRouteMaxExperts = 512;
void moe_route(const int32_t* topk_ids, int64_t num_tokens, int64_t top_k, int64_t num_experts, int32_t* row_of,
               int32_t* token_of_row, int32_t* expert_offsets, cudaStream_t stream);

// The permuted rows re-laid so that each expert's rows start at padded_offsets[e] (a multiple of the GEMM
// chunk, so uniform chunks of rows serve every expert): x_pad[padded_offsets[e] + i] = x_perm[offsets[e] + i]
// for i < offsets[e + 1] - offsets[e] (the padding rows are left as they are), and row_of rewritten to the
// padded rows. offsets [num_experts + 1] and padded_offsets [num_experts] on the device. Rows from
// offsets[num_experts] on (under expert parallelism, the entries served elsewhere) are not copied and their row_of
// points at padded_offsets[num_experts] (then [num_experts + 1] entries): a zero row the caller provides.
void moe_pad_rows(const __nv_bfloat16* x_perm, const int32_t* offsets, const int32_t* padded_offsets,
                  int64_t num_experts, int64_t num_rows, int64_t hidden, __nv_bfloat16* x_pad, int32_t* row_of,
                  cudaStream_t stream);

// moe_pad_rows without x_perm: the same row_of rewrite, and sources [padded_rows] = the x row (token) each padded row
// stands for, -1 for the padding rows: for a consumer that reads x's rows where they are (the FP8 GEMM's
// quantisation, quantize_fp8_activations' source_rows) instead of two copies of them.
void moe_pad_sources(const int32_t* offsets, const int32_t* padded_offsets, int64_t num_experts, int64_t num_rows,
                     int64_t top_k, int64_t padded_rows, int32_t* row_of, int32_t* sources, cudaStream_t stream);

void moe_unpermute(const __nv_bfloat16* y_perm, const int32_t* row_of, const float* topk_weights, int64_t num_tokens,
                   int64_t top_k, int64_t hidden, __nv_bfloat16* out, cudaStream_t stream);

// moe_unpermute and then add_rms_norm (rms_norm.cuh) in one launch, for the decode step's last MoE kernel:
// delta[t] = base[t] + sum_k w[t, k] * y_perm[row_of[t*K + k]] rounded to bf16 as moe_unpermute stores it (base:
// the shared experts' output), residual[t] += delta[t] (stored), normed[t] = RMSNorm(residual[t]) * weight. The
// same bits as the two launches (the same thread layout as add_rms_norm's); delta itself is not stored.
bool moe_unpermute_norm_supports(int64_t top_k, int64_t hidden);
void moe_unpermute_add_rms_norm(const __nv_bfloat16* y_perm, const int32_t* row_of, const float* topk_weights,
                                int64_t num_tokens, int64_t top_k, int64_t hidden, const __nv_bfloat16* base,
                                __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
                                __nv_bfloat16* normed, cudaStream_t stream);

}  // namespace deepinfer::cuda
