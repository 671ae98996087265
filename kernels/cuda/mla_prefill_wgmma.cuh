// MLA prefill attention (mla_prefill.cuh's problem and tiles) at DeepSeek's widths, q.k 128 + 64 and v 128, on
// Hopper's warpgroup MMAs: a block per (64-row tile, head), one warpgroup, 64-key tiles in two cp.async stages,
// P fed to the second MMA from registers. Built for sm_90a in kernels/cuda_sm90a; mla_prefill_attention calls it
// where mla_prefill_wgmma_supports.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

// nope 128, rope 64, v 128, on a device of compute capability 9.0. At most 65,535 tiles (the grid's second dimension).
bool mla_prefill_wgmma_supports(int64_t nope, int64_t rope, int64_t v_dim);

void mla_prefill_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                       int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k,
                       const int32_t* tiles, int64_t num_tiles, int64_t heads, float scale, __nv_bfloat16* out,
                       cudaStream_t stream);

}  // namespace deepinfer::cuda
