#include <cub/cub.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_permute.cuh"

namespace deepinfer::cuda {

namespace {

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct WorkspaceLayout {
  size_t keys_in, keys_out, values_in, values_out, counts, sort_temp, scan_temp, total;
};

WorkspaceLayout layout(int64_t n, int64_t num_experts) {
  WorkspaceLayout w{};
  w.keys_in = w.keys_out = w.values_in = w.values_out = align_up(n * sizeof(int32_t));
  w.counts = align_up((num_experts + 1) * sizeof(int32_t));
  cub::DeviceRadixSort::SortPairs(nullptr, w.sort_temp, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<int>(n));
  cub::DeviceScan::ExclusiveSum(nullptr, w.scan_temp, static_cast<const int32_t*>(nullptr),
                                static_cast<int32_t*>(nullptr), static_cast<int>(num_experts + 1));
  w.sort_temp = align_up(w.sort_temp);
  w.scan_temp = align_up(w.scan_temp);
  w.total = w.keys_in + w.keys_out + w.values_in + w.values_out + w.counts + w.sort_temp + w.scan_temp;
  return w;
}

__global__ void init_kernel(const int32_t* topk_ids, int64_t n, int32_t* keys, int32_t* values, int32_t* counts) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  keys[j] = topk_ids[j];
  values[j] = static_cast<int32_t>(j);
  atomicAdd(&counts[topk_ids[j]], 1);
}

// Copies one row of `hidden` bf16 values with the block's threads: 16-byte pieces when the rows allow it.
__device__ __forceinline__ void copy_row(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t hidden) {
  if (hidden % 8 == 0) {
    for (int64_t i = threadIdx.x; i < hidden / 8; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void gather_kernel(const __nv_bfloat16* x, const int32_t* sorted_flat, int64_t n, int64_t top_k,
                              int64_t hidden, const int32_t* copied_end, __nv_bfloat16* x_perm, int32_t* row_of) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t p = blockIdx.x;
  const int32_t flat = sorted_flat[p];
  if (threadIdx.x == 0) row_of[flat] = static_cast<int32_t>(p);
  if (copied_end == nullptr || p < *copied_end) copy_row(x + (flat / top_k) * hidden, x_perm + p * hidden, hidden);
}

// The expert whose rows [offsets[e], offsets[e + 1]) hold row p (binary search; offsets ascending).
__device__ __forceinline__ int64_t expert_of_row(const int32_t* offsets, int64_t num_experts, int64_t p) {
  int64_t lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= p) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ int64_t padded_row(const int32_t* offsets, const int32_t* padded_offsets,
                                              int64_t num_experts, int64_t p) {
  const int64_t e = expert_of_row(offsets, num_experts, p);
  return padded_offsets[e] + (p - offsets[e]);
}

__global__ void pad_rows_kernel(const __nv_bfloat16* x_perm, const int32_t* offsets, const int32_t* padded_offsets,
                                int64_t num_experts, int64_t hidden, __nv_bfloat16* x_pad) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t p = blockIdx.x;
  if (p >= offsets[num_experts]) return;  // an entry served elsewhere: nothing to compute
  copy_row(x_perm + p * hidden, x_pad + padded_row(offsets, padded_offsets, num_experts, p) * hidden, hidden);
}

// row_of onto the padded rows; with `sources`, each padded row's x row (entry j's token, j / top_k) as well.
__global__ void remap_rows_kernel(const int32_t* offsets, const int32_t* padded_offsets, int64_t num_experts,
                                  int64_t num_rows, int64_t top_k, int32_t* row_of, int32_t* sources) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= num_rows) return;
  const int32_t p = row_of[j];
  if (p >= offsets[num_experts]) {
    row_of[j] = padded_offsets[num_experts];
    return;
  }
  const auto padded = static_cast<int32_t>(padded_row(offsets, padded_offsets, num_experts, p));
  row_of[j] = padded;
  if (sources != nullptr) sources[padded] = static_cast<int32_t>(j / top_k);
}

// moe_permute without the copy: each entry's row in the expert-sorted order.
__global__ void scatter_rows_kernel(const int32_t* sorted_flat, int64_t n, int32_t* row_of) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p < n) row_of[sorted_flat[p]] = static_cast<int32_t>(p);
}

__global__ void unpermute_kernel(const __nv_bfloat16* y_perm, const int32_t* row_of, const float* topk_weights,
                                 int64_t top_k, int64_t hidden, __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  constexpr int kMaxTopK = 8;
  if (hidden % 8 == 0 && top_k <= kMaxTopK) {
    // 8 values per thread and row (16-byte loads); the token's rows and weights read once, and all its rows'
    // loads issued before the sums (in the same order of additions): one row's load after another had taken
    // 8.7 us a layer at 256 tokens x top-6 (ncu), several memory latencies in a row.
    const __nv_bfloat16* rows[kMaxTopK];
    float w[kMaxTopK];
#pragma unroll
    for (int k = 0; k < kMaxTopK; ++k) {
      rows[k] = k < top_k ? y_perm + static_cast<int64_t>(row_of[t * top_k + k]) * hidden : nullptr;
      w[k] = k < top_k ? topk_weights[t * top_k + k] : 0.0f;
    }
    for (int64_t v = threadIdx.x; v < hidden / 8; v += blockDim.x) {
      uint4 y[kMaxTopK];
#pragma unroll
      for (int k = 0; k < kMaxTopK; ++k)
        if (k < top_k) y[k] = reinterpret_cast<const uint4*>(rows[k])[v];
      float acc[8];
      const uint4 base = reinterpret_cast<const uint4*>(out + t * hidden)[v];
      const auto* b = reinterpret_cast<const __nv_bfloat162*>(&base);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(b[j]);
        acc[2 * j] = f.x, acc[2 * j + 1] = f.y;
      }
#pragma unroll
      for (int k = 0; k < kMaxTopK; ++k) {
        if (k >= top_k) break;
        const auto* yb = reinterpret_cast<const __nv_bfloat162*>(&y[k]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __bfloat1622float2(yb[j]);
          acc[2 * j] += w[k] * f.x, acc[2 * j + 1] += w[k] * f.y;
        }
      }
      uint4 result;
      auto* r = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
      reinterpret_cast<uint4*>(out + t * hidden)[v] = result;
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float acc = to_float(out[t * hidden + i]);
    for (int64_t k = 0; k < top_k; ++k)
      acc += topk_weights[t * top_k + k] * to_float(y_perm[static_cast<int64_t>(row_of[t * top_k + k]) * hidden + i]);
    out[t * hidden + i] = to_bf16(acc);
  }
}

constexpr int kRouteThreads = 1024;
constexpr int kRouteWarps = kRouteThreads / 32;
constexpr int kRouteChunks = static_cast<int>(kMoeRouteMaxRows / kRouteThreads);  // pairs a thread holds

// One block. Pairs go in chunks of 1024, one a thread; a pair's place among its expert's pairs is (its expert's
// pairs in earlier chunks) + (in earlier warps of this chunk) + (in earlier lanes of its warp: match_any), which
// is the stable sort's order. The counts per (warp, expert) live in shared memory, turned into prefixes in place.
__global__ void __launch_bounds__(kRouteThreads) route_kernel(const int32_t* topk_ids, int n, int top_k,
                                                              int num_experts, int32_t* row_of,
                                                              int32_t* token_of_row, int32_t* expert_offsets) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ int route_shared[];
  const int stride = num_experts | 1;  // odd: a warp reading one expert's 32 warp counts hits 32 banks
  int* warp_counts = route_shared;                              // [kRouteWarps][stride]
  int* before = warp_counts + kRouteWarps * stride;             // [num_experts + 1]: pairs so far, then offsets
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int e = threadIdx.x; e <= num_experts; e += kRouteThreads) before[e] = 0;
  int expert[kRouteChunks], place[kRouteChunks];
#pragma unroll
  for (int c = 0; c < kRouteChunks; ++c) {
    const int i = c * kRouteThreads + static_cast<int>(threadIdx.x);
    if (c * kRouteThreads >= n) {  // uniform: the block is done with the pairs
      expert[c] = -1;
      continue;
    }
    for (int k = threadIdx.x; k < kRouteWarps * stride; k += kRouteThreads) warp_counts[k] = 0;
    __syncthreads();
    const int e = i < n ? topk_ids[i] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1));
    if (e >= 0 && rank == 0) warp_counts[warp * stride + e] = __popc(peers);
    __syncthreads();
    // Each expert's counts over the 32 warps into exclusive prefixes: one warp an expert, lane w holding warp
    // w's count (a thread an expert walking the 32 warps in turn had cost 7.7 us a call at 1,536 pairs, ncu).
    for (int x = warp; x < num_experts; x += kRouteWarps) {
      const int count = warp_counts[lane * stride + x];
      int inclusive = count;
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += v;
      }
      const int run = before[x];
      warp_counts[lane * stride + x] = run + inclusive - count;
      __syncwarp();
      if (lane == 31) before[x] = run + inclusive;
    }
    __syncthreads();
    expert[c] = e;
    place[c] = e >= 0 ? warp_counts[warp * stride + e] + rank : 0;
    __syncthreads();  // the next chunk clears warp_counts
  }
  // Exclusive prefix of the experts' totals (warp 0, 32 experts a round), into `before`.
  if (warp == 0) {
    int carry = 0;
    for (int base = 0; base <= num_experts; base += 32) {
      const int x = base + lane;
      const int count = x < num_experts ? before[x] : 0;
      int inclusive = count;
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += v;
      }
      if (x <= num_experts) before[x] = carry + inclusive - count;
      carry += __shfl_sync(0xffffffffu, inclusive, 31);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= num_experts; e += kRouteThreads) expert_offsets[e] = before[e];
#pragma unroll
  for (int c = 0; c < kRouteChunks; ++c) {
    if (expert[c] < 0) continue;
    const int i = c * kRouteThreads + static_cast<int>(threadIdx.x);
    const int row = before[expert[c]] + place[c];
    row_of[i] = row;
    token_of_row[row] = i / top_k;
  }
}

// moe_unpermute_add_rms_norm: a block per token in add_rms_norm's layout (kNormThreads, kNormPieces: common.cuh).
constexpr int kNormMaxTopK = 8;

__global__ void __launch_bounds__(kNormThreads)
    unpermute_add_rms_norm_kernel(const __nv_bfloat16* y_perm, const int32_t* row_of, const float* topk_weights,
                                  int64_t top_k, int64_t hidden, const __nv_bfloat16* base,
                                  __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
                                  __nv_bfloat16* normed) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  const int pieces = static_cast<int>(hidden / 8);
  const uint4* rows[kNormMaxTopK];
  float w[kNormMaxTopK];
#pragma unroll
  for (int k = 0; k < kNormMaxTopK; ++k) {
    rows[k] = k < top_k ? reinterpret_cast<const uint4*>(y_perm + row_of[t * top_k + k] * hidden) : nullptr;
    w[k] = k < top_k ? topk_weights[t * top_k + k] : 0.0f;
  }
  auto* res = reinterpret_cast<uint4*>(residual + t * hidden);
  const auto* add = reinterpret_cast<const uint4*>(base + t * hidden);
  uint4 r[kNormPieces];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kNormPieces; ++j) {
    const int p = static_cast<int>(threadIdx.x) + j * kNormThreads;
    if (p >= pieces) continue;
    uint4 y[kNormMaxTopK];
#pragma unroll
    for (int k = 0; k < kNormMaxTopK; ++k)
      if (k < top_k) y[k] = rows[k][p];
    const uint4 a = add[p];
    r[j] = res[p];
    const auto* ab = reinterpret_cast<const __nv_bfloat162*>(&a);
    auto* rb = reinterpret_cast<__nv_bfloat162*>(&r[j]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // moe_unpermute's sum (the base, then the rows in order), rounded as it stores it ...
      float2 acc = __bfloat1622float2(ab[i]);
#pragma unroll
      for (int k = 0; k < kNormMaxTopK; ++k) {
        if (k >= top_k) break;
        const float2 f = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&y[k])[i]);
        acc.x += w[k] * f.x, acc.y += w[k] * f.y;
      }
      const float2 delta = __bfloat1622float2(__floats2bfloat162_rn(acc.x, acc.y));
      // ... then add_rms_norm's residual add, rounded as it stores it.
      const float2 before = __bfloat1622float2(rb[i]);
      rb[i] = __floats2bfloat162_rn(before.x + delta.x, before.y + delta.y);
      const float2 v = __bfloat1622float2(rb[i]);
      sum_sq += v.x * v.x + v.y * v.y;
    }
    res[p] = r[j];
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(hidden) + eps);
  const auto* g = reinterpret_cast<const uint4*>(weight);
  auto* o = reinterpret_cast<uint4*>(normed + t * hidden);
#pragma unroll
  for (int j = 0; j < kNormPieces; ++j) {
    const int p = static_cast<int>(threadIdx.x) + j * kNormThreads;
    if (p >= pieces) continue;
    o[p] = rms_scale8(r[j], inv_rms, g[p]);
  }
}

}  // namespace

void moe_route(const int32_t* topk_ids, int64_t num_tokens, int64_t top_k, int64_t num_experts, int32_t* row_of,
               int32_t* token_of_row, int32_t* expert_offsets, cudaStream_t stream) {
  const int64_t n = num_tokens * top_k;
  // Preconditions the caller guarantees (the model takes this path only within them).
  if (n > kMoeRouteMaxRows || num_experts > kMoeRouteMaxExperts || num_experts < 1) return;
  const size_t shared = (kRouteWarps * (num_experts | 1) + num_experts + 1) * sizeof(int);
  cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  launch_dependent(route_kernel, 1, kRouteThreads, shared, stream, topk_ids, static_cast<int>(n),
                   static_cast<int>(top_k), static_cast<int>(num_experts), row_of, token_of_row, expert_offsets);
}

size_t moe_permute_workspace_bytes(int64_t num_rows, int64_t num_experts) {
  return layout(num_rows, num_experts).total;
}

void moe_permute(const __nv_bfloat16* x, const int32_t* topk_ids, int64_t num_tokens, int64_t top_k, int64_t hidden,
                 int64_t num_experts, __nv_bfloat16* x_perm, int32_t* row_of, int32_t* expert_offsets,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream, int64_t copied_experts) {
  const int64_t n = num_tokens * top_k;
  const WorkspaceLayout w = layout(n, num_experts);
  if (workspace_bytes < w.total) return;  // precondition: the caller sized it with moe_permute_workspace_bytes
  auto* base = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<int32_t*>(base);
  auto* keys_out = reinterpret_cast<int32_t*>(base += w.keys_in);
  auto* values_in = reinterpret_cast<int32_t*>(base += w.keys_out);
  auto* values_out = reinterpret_cast<int32_t*>(base += w.values_in);
  auto* counts = reinterpret_cast<int32_t*>(base += w.values_out);
  void* sort_temp = (base += w.counts);
  void* scan_temp = (base += w.sort_temp);

  cudaMemsetAsync(counts, 0, (num_experts + 1) * sizeof(int32_t), stream);
  if (n > 0)
    launch_dependent(init_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, topk_ids, n, keys_in,
                     values_in, counts);
  size_t sort_bytes = w.sort_temp, scan_bytes = w.scan_temp;
  int end_bit = 1;
  while ((int64_t{1} << end_bit) < num_experts) ++end_bit;
  if (n > 0)
    cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys_out, values_in, values_out,
                                    static_cast<int>(n), 0, end_bit, stream);
  cub::DeviceScan::ExclusiveSum(scan_temp, scan_bytes, counts, expert_offsets, static_cast<int>(num_experts + 1), stream);
  if (n > 0 && x_perm == nullptr)
    launch_dependent(scatter_rows_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, values_out, n,
                     row_of);
  else if (n > 0)
    launch_dependent(gather_kernel, static_cast<unsigned>(n), 128, 0, stream, x, values_out, n, top_k, hidden,
                     copied_experts >= 0 && copied_experts < num_experts ? expert_offsets + copied_experts : nullptr,
                     x_perm, row_of);
}

void moe_pad_rows(const __nv_bfloat16* x_perm, const int32_t* offsets, const int32_t* padded_offsets,
                  int64_t num_experts, int64_t num_rows, int64_t hidden, __nv_bfloat16* x_pad, int32_t* row_of,
                  cudaStream_t stream) {
  if (num_rows == 0) return;
  launch_dependent(pad_rows_kernel, static_cast<unsigned>(num_rows), 128, 0, stream, x_perm, offsets, padded_offsets,
                   num_experts, hidden, x_pad);
  launch_dependent(remap_rows_kernel, static_cast<unsigned>((num_rows + 255) / 256), 256, 0, stream, offsets,
                   padded_offsets, num_experts, num_rows, int64_t{1}, row_of, static_cast<int32_t*>(nullptr));
}

void moe_pad_sources(const int32_t* offsets, const int32_t* padded_offsets, int64_t num_experts, int64_t num_rows,
                     int64_t top_k, int64_t padded_rows, int32_t* row_of, int32_t* sources, cudaStream_t stream) {
  if (padded_rows > 0) cudaMemsetAsync(sources, 0xff, padded_rows * sizeof(int32_t), stream);  // every row -1
  if (num_rows == 0) return;
  launch_dependent(remap_rows_kernel, static_cast<unsigned>((num_rows + 255) / 256), 256, 0, stream, offsets,
                   padded_offsets, num_experts, num_rows, top_k, row_of, sources);
}

void moe_unpermute(const __nv_bfloat16* y_perm, const int32_t* row_of, const float* topk_weights, int64_t num_tokens,
                   int64_t top_k, int64_t hidden, __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_dependent(unpermute_kernel, static_cast<unsigned>(num_tokens), 128, 0, stream, y_perm, row_of, topk_weights,
                   top_k, hidden, out);
}

bool moe_unpermute_norm_supports(int64_t top_k, int64_t hidden) {
  return top_k <= kNormMaxTopK && hidden % 8 == 0 && hidden <= 8 * kNormThreads * kNormPieces;
}

void moe_unpermute_add_rms_norm(const __nv_bfloat16* y_perm, const int32_t* row_of, const float* topk_weights,
                                int64_t num_tokens, int64_t top_k, int64_t hidden, const __nv_bfloat16* base,
                                __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
                                __nv_bfloat16* normed, cudaStream_t stream) {
  // Precondition: moe_unpermute_norm_supports(top_k, hidden).
  if (num_tokens == 0) return;
  launch_dependent(unpermute_add_rms_norm_kernel, static_cast<unsigned>(num_tokens), kNormThreads, 0, stream, y_perm,
                   row_of, topk_weights, top_k, hidden, base, residual, weight, eps, normed);
}

namespace {

__global__ void remap_ids_kernel(const int32_t* ids, int64_t n, const int32_t* places, int64_t num_experts,
                                 int32_t elsewhere, int32_t* out) {
  begin_dependent_kernel();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = ids[i] >= 0 && ids[i] < num_experts ? places[ids[i]] : elsewhere;
}

__global__ void add_rows_at_kernel(const __nv_bfloat16* src, const int32_t* src_rows, const int32_t* dst_rows,
                                   int64_t hidden, __nv_bfloat16* dst) {
  begin_dependent_kernel();
  const __nv_bfloat16* from = src + static_cast<int64_t>(src_rows[blockIdx.x]) * hidden;
  __nv_bfloat16* to = dst + static_cast<int64_t>(dst_rows[blockIdx.x]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    to[i] = __float2bfloat16(__bfloat162float(to[i]) + __bfloat162float(from[i]));
}

__global__ void gather_rows_kernel(const __nv_bfloat16* src, const int32_t* src_rows, int64_t hidden,
                                   __nv_bfloat16* dst) {
  begin_dependent_kernel();
  const __nv_bfloat16* from = src + static_cast<int64_t>(src_rows[blockIdx.x]) * hidden;
  __nv_bfloat16* to = dst + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) to[i] = from[i];
}

}  // namespace

void gather_rows(const __nv_bfloat16* src, const int32_t* src_rows, int64_t n, int64_t hidden, __nv_bfloat16* dst,
                 cudaStream_t stream) {
  if (n == 0) return;
  launch_dependent(gather_rows_kernel, static_cast<unsigned>(n), 256, 0, stream, src, src_rows, hidden, dst);
}

void add_rows_at(const __nv_bfloat16* src, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, int64_t hidden,
                 __nv_bfloat16* dst, cudaStream_t stream) {
  if (n == 0) return;
  launch_dependent(add_rows_at_kernel, static_cast<unsigned>(n), 256, 0, stream, src, src_rows, dst_rows, hidden, dst);
}

void remap_expert_ids(const int32_t* ids, int64_t n, const int32_t* places, int64_t num_experts, int32_t elsewhere,
                      int32_t* out, cudaStream_t stream) {
  if (n == 0) return;
  launch_dependent(remap_ids_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, ids, n, places,
                   num_experts, elsewhere, out);
}

}  // namespace deepinfer::cuda
