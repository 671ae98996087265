// MLA prefill attention in the expanded form, causal over a variable-length batch. For query row r (of
// sequence q_seq[r], at position q_pos[r] within it) and head h:
//   o[r, h, :] = sum_{j <= q_pos[r]} softmax_j(scale * (q_nope . k_nope_j + q_pe . k_pe_j)) * v_j
// with q [Tq, H, nope + rope], kv [Tk, H, nope + v] (kv_b applied to the latents), k_pe rows k_pe_stride apart,
// and the keys of sequence s at rows [cu_k[s], cu_k[s + 1]).
// Work is split into row tiles of consecutive rows of one sequence (mla_prefill_tiles builds them on the host
// for the kernel the shape selects: tile t covers rows [tiles[t], tiles[t + 1])); a tile's keys are staged once in
// shared memory for all its rows. v_dim 128 with 16-multiple q.k widths (DeepSeek's 128 + 64) runs on tensor
// cores in 64-row tiles (16 rows per warp); other shapes one warp per row in 8-row tiles. At 128 + 64 and 128 on
// sm_90 the 64-row tiles run on warpgroup MMAs (mla_prefill_wgmma.cuh), unless the kernel asked for is kMmaSync (an
// A/B's A side); kTma: 128-row tiles whose two warpgroups share TMA-fed stages (mla_prefill_tma.cuh), given the
// tensors' row counts (its maps' bounds).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace deepinfer::cuda {

enum class MlaPrefillKernel { kMmaSync, kWgmma, kTma };

bool mla_prefill_uses_mma(int64_t nope, int64_t rope, int64_t v_dim);
// The tiles of the kernel that `kernel` and the shape select (mla_prefill_attention must be given the same kernel).
std::vector<int32_t> mla_prefill_tiles(const std::vector<int32_t>& q_seq, int64_t nope, int64_t rope, int64_t v_dim,
                                       MlaPrefillKernel kernel = MlaPrefillKernel::kWgmma);
// nope + rope <= 256 and v <= 256.
bool mla_prefill_supports(int64_t nope, int64_t rope, int64_t v_dim);

// False where nothing was launched: a shape past mla_prefill_supports, or kTma's maps refused (q_rows, k_rows).
[[nodiscard]] bool mla_prefill_attention(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                                         int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos,
                                         const int32_t* cu_k, const int32_t* tiles, int64_t num_tiles, int64_t heads,
                                         int64_t nope, int64_t rope, int64_t v_dim, float scale, __nv_bfloat16* out,
                                         cudaStream_t stream, MlaPrefillKernel kernel = MlaPrefillKernel::kWgmma,
                                         int64_t q_rows = 0, int64_t k_rows = 0);

}  // namespace deepinfer::cuda
