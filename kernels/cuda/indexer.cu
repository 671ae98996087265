#include <cub/cub.cuh>

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
                                                                     const int32_t* block_tables, int64_t max_blocks,
                                                                     const int32_t* counts, const int64_t* offsets,
                                                                     const int32_t* first_groups,
                                                                     int64_t ratio, int64_t head_dim, int64_t kv_offset,
                                                                     int64_t gate_offset, bool zero_padding,
                                                                     __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int64_t g = blockIdx.x, s = blockIdx.y;
  const int32_t* block_table = block_tables + s * max_blocks;
  __nv_bfloat16* row = out + (offsets[s] + g) * head_dim;
  if (g >= counts[s]) {  // past the sequence's complete groups
    if (zero_padding)
      for (int64_t d = threadIdx.x; d < head_dim; d += kPoolThreads) row[d] = to_bf16(0.0f);
    return;
  }
  auto entry = [&](int64_t j) {
    return cache + (block_table[j / kBlockTokens] * kBlockTokens + j % kBlockTokens) * entry_stride;
  };
  const int64_t first = (first_groups != nullptr ? first_groups[s] : 0) + g;  // the group pooled into this row
  for (int64_t d = threadIdx.x; d < head_dim; d += kPoolThreads) {
    float max = -INFINITY;
    for (int64_t j = 0; j < ratio; ++j) max = fmaxf(max, to_float(entry(first * ratio + j)[gate_offset + d]));
    float total = 0.0f, sum = 0.0f;
    for (int64_t j = 0; j < ratio; ++j) {
      const float w = expf(to_float(entry(first * ratio + j)[gate_offset + d]) - max);
      total += w;
      sum += w * to_float(entry(first * ratio + j)[kv_offset + d]);
    }
    row[d] = to_bf16(sum / total);
  }
}

__global__ void __launch_bounds__(kWarps * 32) indexer_scores_kernel(const __nv_bfloat16* q, const float* weights,
                                                                     const __nv_bfloat16* keys,
                                                                     const int64_t* key_offsets, const int32_t* visible,
                                                                     int64_t heads, int64_t dim, int64_t num_keys,
                                                                     float softmax_scale, float heads_scale,
                                                                     float* scores) {
  begin_dependent_kernel();
  extern __shared__ float q_row[];  // [heads * dim]
  const int64_t i = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t x = threadIdx.x; x < heads * dim; x += kWarps * 32) q_row[x] = to_float(q[i * heads * dim + x]);
  __syncthreads();
  const __nv_bfloat16* row_keys = keys + (key_offsets != nullptr ? key_offsets[i] : 0) * dim;
  const int64_t seen = visible[i];
  for (int64_t g = blockIdx.y * static_cast<int64_t>(kKeysPerBlock) + warp; g < num_keys &&
                                                                          g < (blockIdx.y + 1) * int64_t{kKeysPerBlock};
       g += kWarps) {
    if (g >= seen) {  // not visible: not read (past the row's own keys, where several sequences share a launch)
      if (lane == 0) scores[i * num_keys + g] = -INFINITY;
      continue;
    }
    float k[kDimRegs];
#pragma unroll
    for (int r = 0; r < kDimRegs; ++r) {
      const int64_t d = lane + 32 * r;
      k[r] = d < dim ? to_float(row_keys[g * dim + d]) : 0.0f;
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
    if (lane == 0) scores[i * num_keys + g] = total;
  }
}

__global__ void indexer_head_sum_kernel(const float* dots, int64_t dots_ld, const float* weights,
                                        const int32_t* visible, int64_t heads, int64_t num_keys, int64_t width,
                                        float softmax_scale, float heads_scale, float* scores) {
  begin_dependent_kernel();
  const int64_t i = blockIdx.x, g = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // rows in grid.x
  if (g >= width) return;
  if (g >= visible[i] || g >= num_keys) {
    scores[i * width + g] = -INFINITY;
    return;
  }
  float total = 0.0f;  // the heads in order, each term as indexer_scores forms it
  for (int64_t h = 0; h < heads; ++h)
    total += fmaxf(dots[(i * heads + h) * dots_ld + g], 0.0f) * softmax_scale * (weights[i * heads + h] * heads_scale);
  scores[i * width + g] = total;
}

constexpr int kSelectThreads = 512;

// Larger floats map to larger unsigned keys; -inf (never selected) to the smallest finite-excluded value.
__device__ __forceinline__ uint32_t order_key(float x) {
  // -0 and +0 are one key: they compare equal on the CPU, so they tie (the lower index wins), not rank. (A score
  // of relu'd products with negative weights is -0 where every product is.)
  const uint32_t bits = x == 0.0f ? 0u : __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__global__ void __launch_bounds__(kSelectThreads) select_topk_kernel(const float* scores, int64_t n, int64_t k,
                                                                     int32_t* ids, int32_t* counts) {
  begin_dependent_kernel();
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int histogram[256];
  __shared__ int finite_total;
  const int64_t r = blockIdx.x;
  const float* s = scores + r * n;
  // How many finite scores: with k or fewer, every one of them is kept.
  int finite = 0;
  for (int64_t i = threadIdx.x; i < n; i += kSelectThreads) finite += s[i] > -INFINITY;
  const int all_finite = static_cast<int>(block_sum(static_cast<float>(finite)) + 0.5f);
  if (threadIdx.x == 0) finite_total = all_finite;
  __syncthreads();
  // Radix select, 8 bits a pass from the top: the k-th largest key, and how many of the keys equal to it to keep.
  uint32_t prefix = 0, mask = 0;
  int remaining = static_cast<int>(k);
  const bool keep_all = finite_total <= k;
  for (int shift = 24; shift >= 0 && !keep_all; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSelectThreads) histogram[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kSelectThreads) {
      const uint32_t key = order_key(s[i]);
      if (s[i] > -INFINITY && (key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xff], 1);
    }
    __syncthreads();
    // Every thread walks the 256 bins from the top (cheap) to find the digit holding the remaining-th key.
    int above = 0, digit = 255;
    for (; digit > 0; --digit) {
      if (above + histogram[digit] >= remaining) break;
      above += histogram[digit];
    }
    remaining -= above;
    prefix |= static_cast<uint32_t>(digit) << shift;
    mask |= 0xffu << shift;
    __syncthreads();  // the histogram is read by every thread before the next pass clears it
  }
  // Keep: finite and (all kept, or key above the threshold, or one of the first `remaining` keys equal to it).
  int written = 0, equal_seen = 0;
  for (int64_t base = 0; base < n; base += kSelectThreads) {
    const int64_t i = base + threadIdx.x;
    const bool valid = i < n && s[i] > -INFINITY;
    const uint32_t key = valid ? order_key(s[i]) : 0;
    const bool equal = valid && !keep_all && key == prefix;
    int equal_rank = 0, equal_count = 0;
    Scan(scan_storage).ExclusiveSum(equal ? 1 : 0, equal_rank, equal_count);
    __syncthreads();
    const bool take = valid && (keep_all || key > prefix || (equal && equal_seen + equal_rank < remaining));
    int position = 0, taken = 0;
    Scan(scan_storage).ExclusiveSum(take ? 1 : 0, position, taken);
    __syncthreads();
    if (take) ids[r * k + written + position] = static_cast<int32_t>(i);
    written += taken;
    equal_seen += equal_count;
  }
  if (threadIdx.x == 0) counts[r] = written;
}

__global__ void candidate_block_scores_kernel(const float* scores, const int32_t* visible, int64_t n,
                                             int64_t block_size, int64_t num_blocks, float* block_scores) {
  begin_dependent_kernel();
  const int64_t r = blockIdx.x, b = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // rows in grid.x
  if (b >= num_blocks) return;
  float best = -INFINITY;
  for (int64_t i = b * block_size; i < n && i < (b + 1) * block_size; ++i) best = fmaxf(best, scores[r * n + i]);
  const int64_t v = visible[r];
  if (v > 0 && (v - 1) / block_size == b) best = INFINITY;  // the block of the newest visible entry: always kept
  block_scores[r * num_blocks + b] = best;
}

__global__ void candidate_mask_kernel(const int32_t* block_ids, const int32_t* block_counts, int64_t n, int64_t k,
                                      int64_t block_size, uint8_t* mask) {
  begin_dependent_kernel();
  const int64_t r = blockIdx.x, i = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // rows in grid.x
  if (i >= n) return;
  const int32_t* ids = block_ids + r * k;
  const int32_t b = static_cast<int32_t>(i / block_size);
  int lo = 0, hi = block_counts[r];  // the kept blocks, ascending: binary search for b
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ids[mid] < b) lo = mid + 1;
    else hi = mid;
  }
  mask[r * n + i] = lo < block_counts[r] && ids[lo] == b ? 1 : 0;
}

__global__ void mask_scores_kernel(float* scores, const uint8_t* mask, int64_t n) {
  begin_dependent_kernel();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && mask[i] == 0) scores[i] = -INFINITY;
}

__global__ void selected_entry_ids_kernel(const int32_t* ids, const int32_t* counts, int64_t slots, int64_t k,
                                          const int64_t* row_bases, int32_t* out) {
  begin_dependent_kernel();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= slots) return;
  out[i] = i % k < counts[i / k] ? static_cast<int32_t>(ids[i] + row_bases[i / k]) : -1;
}

}  // namespace

void candidate_blocks(const float* scores, const int32_t* visible, int64_t rows, int64_t n, int64_t topk_blocks,
                      int64_t block_size, float* block_scores, int32_t* block_ids, int32_t* block_counts,
                      uint8_t* mask, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int kThreads = 256;
  const int64_t num_blocks = (n + block_size - 1) / block_size;
  launch_dependent(candidate_block_scores_kernel,
                   dim3(static_cast<unsigned>(rows), static_cast<unsigned>((num_blocks + kThreads - 1) / kThreads)),
                   kThreads, 0, stream, scores, visible, n, block_size, num_blocks, block_scores);
  select_topk(block_scores, rows, num_blocks, topk_blocks, block_ids, block_counts, stream);
  launch_dependent(candidate_mask_kernel,
                   dim3(static_cast<unsigned>(rows), static_cast<unsigned>((n + kThreads - 1) / kThreads)), kThreads,
                   0, stream, block_ids, block_counts, n, topk_blocks, block_size, mask);
}

void select_topk(const float* scores, int64_t rows, int64_t n, int64_t k, int32_t* ids, int32_t* counts,
                 cudaStream_t stream) {
  if (rows == 0) return;
  launch_dependent(select_topk_kernel, static_cast<unsigned>(rows), kSelectThreads, 0, stream, scores, n, k, ids,
                   counts);
}

void compress_pool_sequences(const __nv_bfloat16* cache, int64_t entry_stride, const int32_t* block_tables,
                             int64_t max_blocks, const int32_t* counts, const int64_t* offsets,
                             const int32_t* first_groups, int64_t sequences, int64_t width, int64_t ratio,
                             int64_t head_dim, int64_t kv_offset, int64_t gate_offset, bool zero_padding,
                             __nv_bfloat16* out, cudaStream_t stream) {
  if (sequences == 0 || width == 0) return;
  launch_dependent(compress_pool_kernel, dim3(static_cast<unsigned>(width), static_cast<unsigned>(sequences)),
                   kPoolThreads, 0, stream, cache, entry_stride, block_tables, max_blocks, counts, offsets,
                   first_groups, ratio, head_dim, kv_offset, gate_offset, zero_padding, out);
}

void indexer_scores(const __nv_bfloat16* q, const float* weights, const __nv_bfloat16* keys,
                    const int64_t* key_offsets, const int32_t* visible,
                    int64_t rows, int64_t heads, int64_t dim, int64_t num_keys, float softmax_scale,
                    float heads_scale, float* scores, cudaStream_t stream) {
  // Preconditions (the model checks them): heads * dim <= kIndexerMaxQueryFloats, dim <= kIndexerMaxDim.
  if (rows == 0 || num_keys == 0 || heads * dim > kIndexerMaxQueryFloats || dim > kIndexerMaxDim) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((num_keys + kKeysPerBlock - 1) / kKeysPerBlock));
  launch_dependent(indexer_scores_kernel, grid, kWarps * 32, heads * dim * sizeof(float), stream, q, weights, keys,
                   key_offsets, visible, heads, dim, num_keys, softmax_scale, heads_scale, scores);
}

void indexer_head_sum(const float* dots, int64_t dots_ld, const float* weights, const int32_t* visible, int64_t rows,
                      int64_t heads, int64_t num_keys, int64_t width, float softmax_scale, float heads_scale,
                      float* scores, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  constexpr int kThreads = 256;
  launch_dependent(indexer_head_sum_kernel,
                   dim3(static_cast<unsigned>(rows), static_cast<unsigned>((width + kThreads - 1) / kThreads)), kThreads,
                   0, stream, dots, dots_ld, weights, visible, heads, num_keys, width, softmax_scale, heads_scale,
                   scores);
}

void mask_scores(float* scores, const uint8_t* mask, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_dependent(mask_scores_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, scores, mask, n);
}

void selected_entry_ids(const int32_t* ids, const int32_t* counts, int64_t rows, int64_t k, const int64_t* row_bases,
                        int32_t* out, cudaStream_t stream) {
  const int64_t slots = rows * k;
  if (slots == 0) return;
  launch_dependent(selected_entry_ids_kernel, static_cast<unsigned>((slots + 255) / 256), 256, 0, stream, ids, counts,
                   slots, k, row_bases, out);
}

}  // namespace deepinfer::cuda
