#include <cub/cub.cuh>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/logits_hash.h"
#include "kernels/philox.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void argmax_kernel(const float* logits, int64_t vocab, int32_t* out, float* probability) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const float* row = logits + blockIdx.x * vocab;
  float best = -INFINITY;
  int64_t best_idx = vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    if (row[i] > best) best = row[i], best_idx = i;  // strided scan: the first max this thread sees
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  values[threadIdx.x] = best;
  indices[threadIdx.x] = best_idx;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float v = values[threadIdx.x + stride];
      const int64_t idx = indices[threadIdx.x + stride];
      if (v > values[threadIdx.x] || (v == values[threadIdx.x] && idx < indices[threadIdx.x])) {
        values[threadIdx.x] = v;
        indices[threadIdx.x] = idx;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(indices[0]);
  if (probability == nullptr) return;
  // The maximum's softmax probability: 1 / sum_i exp(l_i - l_max), the partial sums reduced in a fixed order.
  const float top = values[0];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) sum += __expf(row[i] - top);
  __shared__ float sums[kThreads];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) probability[blockIdx.x] = 1.0f / sums[0];
}

// Smallest index i in [0, n) with pred(i), over the block; n if none.
template <class Pred>
__device__ int64_t block_first(int64_t n, Pred pred) {
  __shared__ int64_t first;
  if (threadIdx.x == 0) first = n;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    if (pred(i)) {
      atomicMin(reinterpret_cast<unsigned long long*>(&first), static_cast<unsigned long long>(i));
      break;
    }
  __syncthreads();
  const int64_t result = first;
  __syncthreads();
  return result;
}

__global__ void sample_kernel(const float* sorted_logits, const int32_t* sorted_idx, int64_t vocab,
                              const SamplingRow* params, float* cumulative, int32_t* out) {
  const int64_t row = blockIdx.x;
  const SamplingRow p = params[row];
  const float* l = sorted_logits + row * vocab;
  const int32_t* idx = sorted_idx + row * vocab;
  if (p.temperature <= 0.0f) {  // stable descending sort: the first is the lowest-index maximum
    if (threadIdx.x == 0) out[row] = idx[0];
    return;
  }
  int64_t kept = p.top_k > 0 ? min(p.top_k, vocab) : vocab;
  float* c = cumulative + row * vocab;
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  float carry = 0.0f;
  for (int64_t base = 0; base < kept; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const float v = i < kept ? expf((l[i] - l[0]) / p.temperature) : 0.0f;
    float inclusive = 0.0f, aggregate = 0.0f;
    Scan(scan_storage).InclusiveSum(v, inclusive, aggregate);
    if (i < kept) c[i] = carry + inclusive;
    carry += aggregate;
    __syncthreads();
  }
  if (p.top_p < 1.0f) {
    const float total = c[kept - 1];
    const int64_t k = block_first(kept, [&](int64_t i) { return c[i] / total >= p.top_p; });
    kept = min(kept, k + 1);
  }
  const float target = philox_uniform(p.seed, static_cast<uint64_t>(p.position)) * c[kept - 1];
  const int64_t pick = block_first(kept, [&](int64_t i) { return target < c[i]; });
  if (threadIdx.x == 0) out[row] = idx[min(pick, kept - 1)];
}

__global__ void iota_kernel(int32_t* values, int64_t vocab, int64_t n, int32_t* offsets, int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) values[i] = static_cast<int32_t>(i % vocab);
  if (i <= rows) offsets[i] = static_cast<int32_t>(i * vocab);
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Layout {
  size_t keys, values_in, values_out, offsets, cumulative, sort_temp, total;
};

Layout layout(int64_t rows, int64_t vocab) {
  Layout w{};
  const int64_t n = rows * vocab;
  w.keys = align_up(n * sizeof(float));
  w.values_in = w.values_out = align_up(n * sizeof(int32_t));
  w.offsets = align_up((rows + 1) * sizeof(int32_t));
  w.cumulative = align_up(n * sizeof(float));
  cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, w.sort_temp, static_cast<const float*>(nullptr),
                                                     static_cast<float*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                     static_cast<int32_t*>(nullptr), static_cast<int>(n),
                                                     static_cast<int>(rows), static_cast<const int32_t*>(nullptr),
                                                     static_cast<const int32_t*>(nullptr));
  w.sort_temp = align_up(w.sort_temp);
  w.total = w.keys + w.values_in + w.values_out + w.offsets + w.cumulative + w.sort_temp;
  return w;
}

// One block a row; each thread takes mask words and writes -inf only where a bit is 0 (the logits are not read).
__global__ void apply_token_bitmask_kernel(float* logits, int64_t vocab, const uint32_t* masks, int64_t words,
                                           const uint8_t* masked) {
  const int64_t r = blockIdx.x;
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  if (masked[r] == 0) return;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
    const uint32_t m = masks[r * words + w];
    if (m == 0xffffffffu) continue;
    for (int b = 0; b < 32; ++b) {
      const int64_t v = w * 32 + b;
      if (v < vocab && ((m >> b) & 1u) == 0) logits[r * vocab + v] = -INFINITY;
    }
  }
}

}  // namespace

void apply_token_bitmask(float* logits, int64_t rows, int64_t vocab, const uint32_t* masks, int64_t words,
                         const uint8_t* masked, cudaStream_t stream) {
  if (rows == 0) return;
  launch_dependent(apply_token_bitmask_kernel, static_cast<unsigned>(rows), 256, 0, stream, logits, vocab, masks,
                   words, masked);
}

namespace {

// One block a row: each thread sums its terms, the warps their threads', thread 0 the warps' (a sum mod 2^64
// commutes, so the order does not matter).
__global__ void row_hash_kernel(const float* logits, int64_t vocab, unsigned long long* out) {
  constexpr int kHashThreads = 256;
  __shared__ unsigned long long warp_sums[kHashThreads / 32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  unsigned long long sum = 0;
  for (int64_t v = threadIdx.x; v < vocab; v += kHashThreads)
    sum += logits_hash_term(static_cast<uint64_t>(v), __float_as_uint(row[v]));
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int w = 0; w < kHashThreads / 32; ++w) total += warp_sums[w];
    out[blockIdx.x] = total;
  }
}

}  // namespace

void logits_row_hashes(const float* logits, int64_t rows, int64_t vocab, uint64_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  row_hash_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(logits, vocab,
                                                                   reinterpret_cast<unsigned long long*>(out));
}

namespace {
__global__ void scatter_sampled_kernel(const int32_t* sampled, const int32_t* targets, int64_t count,
                                       int32_t* token_ids) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) token_ids[targets[2 * i]] = sampled[targets[2 * i + 1]];
}
}  // namespace

void scatter_sampled_tokens(const int32_t* sampled, const int32_t* targets, int64_t count, int32_t* token_ids,
                            cudaStream_t stream) {
  if (count > 0)
    scatter_sampled_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(sampled, targets, count,
                                                                                          token_ids);
}

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, float* probability,
                 cudaStream_t stream) {
  if (rows == 0) return;
  launch_dependent(argmax_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, logits, vocab, out, probability);
}

size_t sample_workspace_bytes(int64_t rows, int64_t vocab) { return layout(rows, vocab).total; }

void sample_rows(const float* logits, int64_t rows, int64_t vocab, const SamplingRow* params, int32_t* out,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (rows == 0) return;
  const Layout w = layout(rows, vocab);
  if (workspace_bytes < w.total) return;  // precondition: sized with sample_workspace_bytes
  auto* base = static_cast<char*>(workspace);
  auto* keys = reinterpret_cast<float*>(base);
  auto* values_in = reinterpret_cast<int32_t*>(base += w.keys);
  auto* values_out = reinterpret_cast<int32_t*>(base += w.values_in);
  auto* offsets = reinterpret_cast<int32_t*>(base += w.values_out);
  auto* cumulative = reinterpret_cast<float*>(base += w.offsets);
  void* sort_temp = (base += w.cumulative);
  const int64_t n = rows * vocab;
  iota_kernel<<<static_cast<unsigned>((std::max(n, rows + 1) + 255) / 256), 256, 0, stream>>>(values_in, vocab, n, offsets, rows);
  size_t sort_bytes = w.sort_temp;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(sort_temp, sort_bytes, logits, keys, values_in, values_out,
                                                     static_cast<int>(n), static_cast<int>(rows), offsets, offsets + 1,
                                                     0, 32, stream);
  sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(keys, values_out, vocab, params, cumulative, out);
}

}  // namespace deepinfer::cuda
