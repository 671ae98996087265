#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_decode.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;              // one head per warp
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 16;          // cache entries staged in shared memory at a time
constexpr int kMaxDimRegs = 24;        // latent + rope <= 768
constexpr int kMaxLatentRegs = 16;     // latent <= 512

// One block per (sequence, KV split, group of 8 heads): the split's cache entries are staged in shared memory
// once per tile and read by all 8 heads (each warp one head), so the KV is read heads/8 times, not per head.
// Online softmax per warp; the partial result is [latent accumulators | running max | running sum].
__global__ void __launch_bounds__(kThreads, 2) decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                                    int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t heads,
                                    int64_t latent, int64_t rope, float scale, int64_t num_splits, float* partial) {
  extern __shared__ __nv_bfloat16 tile[];  // [kTileKeys][dim]
  const int64_t b = blockIdx.x, split = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t h = blockIdx.z * kWarps + warp;
  const bool active = h < heads;
  const int64_t dim = latent + rope;
  const int64_t len = seq_lens[b];
  const int64_t per_split = (len + num_splits - 1) / num_splits;
  const int64_t begin = split * per_split, end = min(len, begin + per_split);

  float q_reg[kMaxDimRegs];
  float acc[kMaxLatentRegs];
#pragma unroll
  for (int i = 0; i < kMaxDimRegs; ++i) {
    const int64_t d = lane + 32 * i;
    q_reg[i] = active && d < dim ? to_float(q[(b * heads + h) * dim + d]) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kMaxLatentRegs; ++i) acc[i] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

  for (int64_t tile_begin = begin; tile_begin < end; tile_begin += kTileKeys) {
    const int64_t tile_len = min(static_cast<int64_t>(kTileKeys), end - tile_begin);
    __syncthreads();  // the previous tile is no longer read
    // Warp w stages keys w, w + 8, ...: one block-table lookup per key, 16-byte loads along the entry
    // (entries are 16-byte aligned when dim is a multiple of 8, as 512 + 64 is; otherwise 2-byte loads).
    for (int64_t t = warp; t < tile_len; t += kWarps) {
      const int64_t j = tile_begin + t;
      const int64_t block = block_table[b * max_blocks_per_seq + j / kMlaBlockSize];
      const __nv_bfloat16* src = cache + (block * kMlaBlockSize + j % kMlaBlockSize) * dim;
      __nv_bfloat16* dst = tile + t * dim;
      if (dim % 8 == 0) {
        for (int64_t v = lane; v < dim / 8; v += 32)
          reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
      } else {
        for (int64_t d = lane; d < dim; d += 32) dst[d] = src[d];
      }
    }
    __syncthreads();
    if (!active) continue;
    for (int64_t t = 0; t < tile_len; ++t) {
      const __nv_bfloat16* entry = tile + t * dim;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxDimRegs; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < dim) dot += q_reg[i] * to_float(entry[d]);
      }
      const float score = warp_sum(dot) * scale;
      const float new_max = fmaxf(running_max, score);
      const float correction = expf(running_max - new_max);
      const float p = expf(score - new_max);
      running_sum = running_sum * correction + p;
#pragma unroll
      for (int i = 0; i < kMaxLatentRegs; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < latent) acc[i] = acc[i] * correction + p * to_float(entry[d]);
      }
      running_max = new_max;
    }
  }
  if (!active) return;
  float* out = partial + ((b * heads + h) * num_splits + split) * (latent + 2);
#pragma unroll
  for (int i = 0; i < kMaxLatentRegs; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < latent) out[d] = acc[i];
  }
  if (lane == 0) {
    out[latent] = running_max;
    out[latent + 1] = running_sum;
  }
}

__global__ void decode_combine_kernel(const float* partial, int64_t heads, int64_t latent, int64_t num_splits,
                                      __nv_bfloat16* out) {
  const int64_t b = blockIdx.x, h = blockIdx.y;
  const float* parts = partial + (b * heads + h) * num_splits * (latent + 2);
  float global_max = -INFINITY;
  for (int64_t s = 0; s < num_splits; ++s) global_max = fmaxf(global_max, parts[s * (latent + 2) + latent]);
  float total = 0.0f;
  for (int64_t s = 0; s < num_splits; ++s) {
    const float m = parts[s * (latent + 2) + latent];
    if (m != -INFINITY) total += expf(m - global_max) * parts[s * (latent + 2) + latent + 1];
  }
  for (int64_t d = threadIdx.x; d < latent; d += blockDim.x) {
    float value = 0.0f;
    for (int64_t s = 0; s < num_splits; ++s) {
      const float m = parts[s * (latent + 2) + latent];
      if (m != -INFINITY) value += expf(m - global_max) * parts[s * (latent + 2) + d];
    }
    out[(b * heads + h) * latent + d] = to_bf16(value / total);
  }
}

}  // namespace

bool mla_decode_supports(int64_t latent, int64_t rope) {
  return latent <= 32 * kMaxLatentRegs && latent + rope <= 32 * kMaxDimRegs;
}

size_t mla_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t latent, int64_t num_splits) {
  return static_cast<size_t>(batch * heads * num_splits * (latent + 2)) * sizeof(float);
}

void mla_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                          int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                          int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                          __nv_bfloat16* out, cudaStream_t stream) {
  if (batch == 0) return;
  // Preconditions (mla_decode_supports): latent <= 512, latent + rope <= 768; every sequence has an entry.
  if (!mla_decode_supports(latent, rope)) return;
  const dim3 split_grid(static_cast<unsigned>(batch), static_cast<unsigned>(num_splits),
                        static_cast<unsigned>((heads + kWarps - 1) / kWarps));
  const size_t shared = kTileKeys * (latent + rope) * sizeof(__nv_bfloat16);
  decode_split_kernel<<<split_grid, kThreads, shared, stream>>>(q, cache, block_table, max_blocks_per_seq, seq_lens,
                                                                heads, latent, rope, scale, num_splits, workspace);
  const dim3 combine_grid(static_cast<unsigned>(batch), static_cast<unsigned>(heads));
  decode_combine_kernel<<<combine_grid, 128, 0, stream>>>(workspace, heads, latent, num_splits, out);
}

}  // namespace deepinfer::cuda
