// MLA decode attention for DeepSeek-V3's 128 heads (any multiple of 64) on Hopper's warpgroup MMAs: the problem of
// mla_decode.cuh at latent 512 + rope 64, a block per 64 heads of a sequence's KV split, so each split's cache
// entries are read from memory once per 64 heads (the mma.sync kernel of mla_decode.cu reads them once per 16).
// Same partition (num_splits, keys_per_split) and partials ([latent | max | sum] per sequence, head and split, into
// `partial`, mla_decode_workspace_bytes of them; mla_decode.cu combines them), or with one split the bf16 output
// itself. Built for sm_90a in kernels/cuda_sm90a; mla_decode_attention calls it where mla_decode_wgmma_supports.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

// heads a multiple of 64, latent 512, rope 64, on a device of compute capability 9.0.
bool mla_decode_wgmma_supports(int64_t heads, int64_t latent, int64_t rope);

void mla_decode_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                      int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads, float scale,
                      int64_t num_splits, int64_t keys_per_split, float* partial, __nv_bfloat16* out,
                      cudaStream_t stream);

}  // namespace deepinfer::cuda
