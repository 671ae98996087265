#include "kernels/cuda/common.cuh"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int64_t kBlockTokens = 64;
constexpr int kPoolThreads = 256;
constexpr int kWarps = 8;
constexpr int kKeysPerBlock = 64;
constexpr int kDimRegs = static_cast<int>(kIndexerMaxDim / 32);

__global__ void __launch_bounds__(kPoolThreads) compress_pool_kernel(const __nv_bfloat16* cache, int64_t entry_stride,
                                                                     const int32_t* block_table, int64_t ratio,
                                                                     int64_t head_dim, int64_t kv_offset,
                                                                     int64_t gate_offset, __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int64_t g = blockIdx.x;
  auto entry = [&](int64_t j) {
    return cache + (block_table[j / kBlockTokens] * kBlockTokens + j % kBlockTokens) * entry_stride;
  };
  for (int64_t d = threadIdx.x; d < head_dim; d += kPoolThreads) {
    float max = -INFINITY;
    for (int64_t j = 0; j < ratio; ++j) max = fmaxf(max, to_float(entry(g * ratio + j)[gate_offset + d]));
    float total = 0.0f, sum = 0.0f;
    for (int64_t j = 0; j < ratio; ++j) {
      const float w = expf(to_float(entry(g * ratio + j)[gate_offset + d]) - max);
      total += w;
      sum += w * to_float(entry(g * ratio + j)[kv_offset + d]);
    }
    out[g * head_dim + d] = to_bf16(sum / total);
  }
}

__global__ void __launch_bounds__(kWarps * 32) indexer_scores_kernel(const __nv_bfloat16* q, const float* weights,
                                                                     const __nv_bfloat16* keys, const int32_t* visible,
                                                                     int64_t heads, int64_t dim, int64_t num_keys,
                                                                     float softmax_scale, float heads_scale,
                                                                     float* scores) {
  begin_dependent_kernel();
  extern __shared__ float q_row[];  // [heads * dim]
  const int64_t i = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t x = threadIdx.x; x < heads * dim; x += kWarps * 32) q_row[x] = to_float(q[i * heads * dim + x]);
  __syncthreads();
  for (int64_t g = blockIdx.y * static_cast<int64_t>(kKeysPerBlock) + warp; g < num_keys &&
                                                                          g < (blockIdx.y + 1) * int64_t{kKeysPerBlock};
       g += kWarps) {
    float k[kDimRegs];
#pragma unroll
    for (int r = 0; r < kDimRegs; ++r) {
      const int64_t d = lane + 32 * r;
      k[r] = d < dim ? to_float(keys[g * dim + d]) : 0.0f;
    }
    float total = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int r = 0; r < kDimRegs; ++r) {
        const int64_t d = lane + 32 * r;
        if (d < dim) dot += q_row[h * dim + d] * k[r];
      }
      dot = warp_sum(dot);
      total += fmaxf(dot, 0.0f) * softmax_scale * (weights[i * heads + h] * heads_scale);
    }
    if (lane == 0) scores[i * num_keys + g] = g < visible[i] ? total : -INFINITY;
  }
}

}  // namespace

void compress_pool(const __nv_bfloat16* cache, int64_t entry_stride, const int32_t* block_table, int64_t groups,
                   int64_t ratio, int64_t head_dim, int64_t kv_offset, int64_t gate_offset, __nv_bfloat16* out,
                   cudaStream_t stream) {
  if (groups == 0) return;
  launch_dependent(compress_pool_kernel, static_cast<unsigned>(groups), kPoolThreads, 0, stream, cache, entry_stride,
                   block_table, ratio, head_dim, kv_offset, gate_offset, out);
}

void indexer_scores(const __nv_bfloat16* q, const float* weights, const __nv_bfloat16* keys, const int32_t* visible,
                    int64_t rows, int64_t heads, int64_t dim, int64_t num_keys, float softmax_scale,
                    float heads_scale, float* scores, cudaStream_t stream) {
  // Preconditions (the model checks them): heads * dim <= kIndexerMaxQueryFloats, dim <= kIndexerMaxDim.
  if (rows == 0 || num_keys == 0 || heads * dim > kIndexerMaxQueryFloats || dim > kIndexerMaxDim) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((num_keys + kKeysPerBlock - 1) / kKeysPerBlock));
  launch_dependent(indexer_scores_kernel, grid, kWarps * 32, heads * dim * sizeof(float), stream, q, weights, keys,
                   visible, heads, dim, num_keys, softmax_scale, heads_scale, scores);
}

}  // namespace deepinfer::cuda
