// MLA prefill attention (mla_prefill.cuh's problem) at DeepSeek's widths, q.k 128 + 64 and v 128, on Hopper's
// warpgroup MMAs in 128-row tiles: a block per (tile, head), two warpgroups of 64 rows sharing four stages of keys and
// values that a copy warp brings by TMA. Built for sm_90a in kernels/cuda_sm90a; mla_prefill_attention calls it for
// MlaPrefillKernel::kTma, on tiles of kMlaPrefillTmaRows rows (mla_prefill_tiles for that kernel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

inline constexpr int64_t kMlaPrefillTmaRows = 128;

// nope 128, rope 64, v 128, on a device of compute capability 9.0.
bool mla_prefill_tma_supports(int64_t nope, int64_t rope, int64_t v_dim);

// q_rows and k_rows: q's and kv's rows (the TMA maps' bounds). Pointers 16-byte aligned, k_pe_stride a multiple of 8,
// at most 65,535 tiles (the grid's second dimension). False where a map could not be made (nothing launched).
[[nodiscard]] bool mla_prefill_tma(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                                   int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k,
                                   const int32_t* tiles, int64_t num_tiles, int64_t heads, int64_t q_rows,
                                   int64_t k_rows, float scale, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
