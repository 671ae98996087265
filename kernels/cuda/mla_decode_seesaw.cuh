// MLA decode attention for DeepSeek-V3's 128 heads (any multiple of 64) on Hopper's warpgroup MMAs, the two
// warpgroups of a 64-head block taking alternate 64-key tiles, so that one's softmax overlaps the other's MMAs
// (FlashMLA's "seesaw" schedule), with each tile brought by TMA an atom at a time. The problem, partition and partials
// of mla_decode.cuh, except that splits start on a cache block: keys_per_split a multiple of 64, or without it each
// split's share rounded up to whole blocks (some splits may then be empty). Built for sm_90a in kernels/cuda_sm90a;
// mla_decode_attention calls it for MlaDecodeKernel::kSeesaw where mla_decode_seesaw_supports.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

// heads a multiple of 64, latent 512, rope 64, keys_per_split a multiple of 64 (or 0), on compute capability 9.0.
bool mla_decode_seesaw_supports(int64_t heads, int64_t latent, int64_t rope, int64_t keys_per_split);

// False where the cache's tensor map could not be made (nothing launched). The cache: at most 2^29 entries.
[[nodiscard]] bool mla_decode_seesaw(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                                     int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch,
                                     int64_t heads, float scale, int64_t num_splits, int64_t keys_per_split,
                                     float* partial, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
