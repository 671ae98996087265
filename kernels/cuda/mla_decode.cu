#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_decode.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxDimPerThread = 8;  // latent <= 1024

// One block per (sequence, head, split): online softmax over the split's cache entries.
// Partial result: [latent accumulators | running max | running sum].
__global__ void decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                                    int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t heads,
                                    int64_t latent, int64_t rope, float scale, int64_t num_splits, float* partial) {
  const int64_t b = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int64_t dim = latent + rope;
  const int64_t len = seq_lens[b];
  const int64_t per_split = (len + num_splits - 1) / num_splits;
  const int64_t begin = split * per_split, end = min(len, begin + per_split);
  const __nv_bfloat16* qh = q + (b * heads + h) * dim;
  float q_reg[kMaxDimPerThread + 2];
  int count = 0;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) q_reg[count++] = to_float(qh[d]);
  float acc[kMaxDimPerThread] = {};
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t j = begin; j < end; ++j) {
    const int64_t block = block_table[b * max_blocks_per_seq + j / kMlaBlockSize];
    const __nv_bfloat16* entry = cache + (block * kMlaBlockSize + j % kMlaBlockSize) * dim;
    float dot = 0.0f;
    int i = 0;
    for (int64_t d = threadIdx.x; d < dim; d += kThreads) dot += q_reg[i++] * to_float(entry[d]);
    const float score = block_sum(dot) * scale;
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
    i = 0;
    for (int64_t d = threadIdx.x; d < latent; d += kThreads, ++i) acc[i] = acc[i] * correction + p * to_float(entry[d]);
    running_max = new_max;
  }
  float* out = partial + ((b * heads + h) * num_splits + split) * (latent + 2);
  int i = 0;
  for (int64_t d = threadIdx.x; d < latent; d += kThreads) out[d] = acc[i++];
  if (threadIdx.x == 0) {
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

size_t mla_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t latent, int64_t num_splits) {
  return static_cast<size_t>(batch * heads * num_splits * (latent + 2)) * sizeof(float);
}

void mla_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                          int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                          int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                          __nv_bfloat16* out, cudaStream_t stream) {
  if (batch == 0) return;
  // Preconditions: latent + rope <= kThreads * kMaxDimPerThread; every sequence has at least one entry.
  const dim3 split_grid(static_cast<unsigned>(batch), static_cast<unsigned>(heads), static_cast<unsigned>(num_splits));
  decode_split_kernel<<<split_grid, kThreads, 0, stream>>>(q, cache, block_table, max_blocks_per_seq, seq_lens, heads,
                                                           latent, rope, scale, num_splits, workspace);
  const dim3 combine_grid(static_cast<unsigned>(batch), static_cast<unsigned>(heads));
  decode_combine_kernel<<<combine_grid, 128, 0, stream>>>(workspace, heads, latent, num_splits, out);
}

}  // namespace deepinfer::cuda
