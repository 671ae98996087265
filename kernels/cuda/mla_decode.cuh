// MLA decode attention in the absorbed form on the paged latent cache (FlashMLA's problem): for each
// sequence b and head h,
//   o[b, h, :] = sum_j softmax_j(scale * q[b, h, :] . cache_j) * cache_j[:latent]
// where q[b, h] = [W_uk^T q_nope | RoPE'd q_pe] (latent + rope values) and cache_j is the sequence's entry j
// ([latent | k_pe], same width), j < seq_lens[b], found through block_table[b, j / 64].
// The KV length is split into num_splits (1..kMlaDecodeMaxSplits) chunks computed by separate blocks, then combined
// (flash-decoding): each sequence's keys in num_splits equal chunks, or with keys_per_split > 0 in chunks of that
// many keys (split s: keys [s * keys_per_split, (s + 1) * keys_per_split)), so a sequence's partition depends on its
// own length only, not on the launch's split count (--batch-invariant); the splits past its keys are empty and
// weigh nothing in the combine.
// Workspace: mla_decode_workspace_bytes(...) bytes of fp32 partials, from the caller.
// Where mla_decode_wgmma_supports (a multiple of 64 heads at 512 + 64, on sm_90) the splits run on warpgroup MMAs,
// 64 heads a block (mla_decode_wgmma.cuh; MlaDecodeKernel::kSeesaw: the two warpgroups on alternate tiles,
// mla_decode_seesaw.cuh, where it takes the partition); kMmaSync keeps the mma.sync kernel, 16 heads a block (an
// A/B's A side). The projected form below always takes the mma.sync kernel (batch 1-2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kMlaBlockSize = 64;
constexpr int64_t kMlaDecodeMaxSplits = 256;

enum class MlaDecodeKernel { kMmaSync, kWgmma, kSeesaw };

// The kernel's register tiles hold latent <= 512 and latent + rope <= 768 (DeepSeek V2/V3: 512 + 64).
bool mla_decode_supports(int64_t latent, int64_t rope);

// The split count for `rows` sequences of at most max_len keys on num_sms SMs (the kernel's shape decides it); the
// projected form's rows pass kMmaSync (it runs the mma.sync kernel).
int64_t mla_decode_splits(int64_t rows, int64_t heads, int64_t latent, int64_t rope, int64_t max_len, int64_t num_sms,
                          MlaDecodeKernel kernel = MlaDecodeKernel::kWgmma);

size_t mla_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t latent, int64_t num_splits);

void mla_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                          int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                          int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                          __nv_bfloat16* out, cudaStream_t stream, int64_t keys_per_split = 0,
                          MlaDecodeKernel kernel = MlaDecodeKernel::kWgmma);

// The same followed by the absorbed form's output projection per head, for a few sequences: attn[b, h, i] =
// bf16(o[b, h, :]) . w[h][i, :], head h's rows at projection.w + h * head_stride, `latent` apart, `rows` of them
// (W_uv inside kv_b). It takes the place of the split combine and a separate matrix-vector product: the combine
// computes each head's o once per 32 output rows and multiplies it there. Built for latent 512 + rope 64 with at
// least two splits (mla_decode_projected_supports); attn: [batch, heads, rows].
struct LatentProjection {
  const __nv_bfloat16* w;
  int64_t rows, head_stride;
};
bool mla_decode_projected_supports(int64_t latent, int64_t rope, int64_t num_splits);
void mla_decode_attention_projected(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                                    int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                                    int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                                    LatentProjection projection, __nv_bfloat16* attn, cudaStream_t stream);

}  // namespace deepinfer::cuda
