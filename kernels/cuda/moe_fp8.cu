#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/grouped_expert_launch.cuh"
#include "kernels/cuda/moe_fp8.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kGateUpRowsPerWarp = 2;
constexpr int kBatch = 4;  // 16-byte pieces of each of two rows a lane keeps in flight
constexpr int kSharedLimit = 48 * 1024;

// 16 e4m3 codes times 16 bf16 values (two 16-byte pieces), summed in fp32.
__device__ __forceinline__ float dot16(const uint4& codes, const __nv_bfloat16* values) {
  const uint4 v0 = reinterpret_cast<const uint4*>(values)[0], v1 = reinterpret_cast<const uint4*>(values)[1];
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&v0);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v1);
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 lo = e4m3x2_to_float2(words[w] & 0xffffu), hi = e4m3x2_to_float2(words[w] >> 16);
    const float2 xa = __bfloat1622float2(w < 2 ? a[2 * w] : b[2 * w - 4]);
    const float2 xb = __bfloat1622float2(w < 2 ? a[2 * w + 1] : b[2 * w - 3]);
    sum += lo.x * xa.x + lo.y * xa.y + hi.x * xb.x + hi.y * xb.y;
  }
  return sum;
}

// Dot products of two FP8 weight rows (codes row0/row1, their tiles' scales scales0/scales1) with two bf16 vectors in
// shared memory over `n` values (a multiple of 16): lane takes 16-code pieces lane, lane + 32, ..., kBatch of both
// rows loaded before any is used. row1 may be null (its sum is 0). The warp sums.
__device__ __forceinline__ float2 dot_pair(const uint8_t* row0, const float* scales0, const __nv_bfloat16* vec0,
                                           const uint8_t* row1, const float* scales1, const __nv_bfloat16* vec1,
                                           int n, int block) {
  const int lane = threadIdx.x % 32, pieces = n / 16;
  float sum0 = 0.0f, sum1 = 0.0f;
  for (int base = lane; base < pieces; base += 32 * kBatch) {
    uint4 w0[kBatch], w1[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + 32 * u;
      w0[u] = i < pieces ? __ldg(reinterpret_cast<const uint4*>(row0) + i) : uint4{};
      w1[u] = i < pieces && row1 != nullptr ? __ldg(reinterpret_cast<const uint4*>(row1) + i) : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + 32 * u;
      if (i >= pieces) break;
      const int tile = 16 * i / block;
      sum0 += __ldg(scales0 + tile) * dot16(w0[u], vec0 + 16 * i);
      if (row1 != nullptr) sum1 += __ldg(scales1 + tile) * dot16(w1[u], vec1 + 16 * i);
    }
  }
  return {warp_sum(sum0), warp_sum(sum1)};
}

// Row r of an expert's weight [rows, cols]: its codes and its tile row's scales.
struct RowOf {
  Fp8Rows w;
  int64_t cols;
  __device__ const uint8_t* codes(int64_t row) const { return w.codes + row * cols; }
  __device__ const float* scales(int64_t row) const {
    return w.scales + (row / w.block) * ((cols + w.block - 1) / w.block);
  }
};

// Block (pair p = (t, k), tile of kWarps * kGateUpRowsPerWarp rows of inter).
template <bool kClamp>
__global__ void gate_up_kernel(const __nv_bfloat16* x, const int32_t* ids, int64_t top_k, int64_t num_experts,
                               int64_t hidden, int64_t inter, Fp8Rows gate_up, float swiglu_limit,
                               __nv_bfloat16* act) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [hidden]
  const int64_t pair = blockIdx.x, t = pair / top_k;
  const int warp = threadIdx.x / 32;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kGateUpRowsPerWarp;
  const int64_t e = ids[pair];
  if (e >= num_experts) {  // served on another rank
    for (int r = 0; r < kGateUpRowsPerWarp; ++r)
      if (first + r < inter && threadIdx.x % 32 == 0) act[pair * inter + first + r] = to_bf16(0.0f);
    return;
  }
  for (int64_t i = threadIdx.x; i < hidden / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x + t * hidden)[i];
  __syncthreads();
  const RowOf w{gate_up, hidden};
  const int64_t base = e * 2 * inter;
#pragma unroll
  for (int r = 0; r < kGateUpRowsPerWarp; ++r) {
    const int64_t row = first + r;
    if (row >= inter) break;
    const float2 dots = dot_pair(w.codes(base + row), w.scales(base + row), xs, w.codes(base + inter + row),
                                 w.scales(base + inter + row), xs, static_cast<int>(hidden), gate_up.block);
    float gate = dots.x, up = dots.y;
    if constexpr (kClamp) clamp_swiglu(gate, up, swiglu_limit);
    if (threadIdx.x % 32 == 0) act[pair * inter + row] = to_bf16(gate / (1.0f + expf(-gate)) * up);
  }
}

// Block (token t, tile of kWarps hidden rows): every k of the token in k order, added onto out.
__global__ void down_kernel(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t top_k,
                            int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows down, __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [top_k][inter]
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < top_k * inter / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(as)[i] = reinterpret_cast<const uint4*>(act + t * top_k * inter)[i];
  __syncthreads();
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32;
  if (row >= hidden) return;
  const RowOf w{down, inter};
  // The k of this token served here, in order (others add nothing).
  auto expert_row = [&](int64_t k) { return ids[t * top_k + k] * hidden + row; };
  float sum = 0.0f;
  int64_t k = 0;
  while (k < top_k) {
    int64_t k0 = k;
    while (k0 < top_k && ids[t * top_k + k0] >= num_experts) ++k0;
    if (k0 >= top_k) break;
    int64_t k1 = k0 + 1;
    while (k1 < top_k && ids[t * top_k + k1] >= num_experts) ++k1;
    const bool second = k1 < top_k;
    const int64_t r0 = expert_row(k0), r1 = second ? expert_row(k1) : r0;
    const float2 dots = dot_pair(w.codes(r0), w.scales(r0), as + k0 * inter, second ? w.codes(r1) : nullptr,
                                 w.scales(r1), as + (second ? k1 : k0) * inter, static_cast<int>(inter), down.block);
    sum += weights[t * top_k + k0] * dots.x;
    if (second) sum += weights[t * top_k + k1] * dots.y;
    k = k1 + (second ? 1 : 0);
  }
  if (threadIdx.x % 32 == 0) out[t * hidden + row] = to_bf16(to_float(out[t * hidden + row]) + sum);
}

// The grouped forms: a block per (expert e, tile of weight rows), e's pairs (moe_route's rows [offsets[e],
// offsets[e + 1])) taken kGroupedVecs at a time from shared memory, each warp's rows streamed once for them.
constexpr int kGroupedVecs = 4;
constexpr int kGroupedRowsPerWarp = 4;  // gate_up: 2 activations (their gate and up rows); down: 4 hidden rows
constexpr int64_t kGroupedMaxShared = 96 * 1024;

// sums[v][r] = W[rows[r]] . vecs[v] for v < count (vecs `stride` apart in shared memory), each lane over its pieces in
// dot_pair's order, then the warp's sum.
__device__ __forceinline__ void dot_rows(const RowOf& w, const int64_t (&rows)[kGroupedRowsPerWarp], int n,
                                         const __nv_bfloat16* vecs, int64_t stride, int count,
                                         float (&sums)[kGroupedVecs][kGroupedRowsPerWarp]) {
  const int lane = threadIdx.x % 32, pieces = n / 16;
#pragma unroll
  for (int v = 0; v < kGroupedVecs; ++v)
#pragma unroll
    for (int r = 0; r < kGroupedRowsPerWarp; ++r) sums[v][r] = 0.0f;
  for (int i = lane; i < pieces; i += 32) {
    const int tile = 16 * i / w.w.block;
#pragma unroll
    for (int r = 0; r < kGroupedRowsPerWarp; ++r) {
      const uint4 codes = __ldg(reinterpret_cast<const uint4*>(w.codes(rows[r])) + i);
      const float scale = __ldg(w.scales(rows[r]) + tile);
#pragma unroll
      for (int v = 0; v < kGroupedVecs; ++v)
        if (v < count) sums[v][r] += scale * dot16(codes, vecs + v * stride + 16 * i);
    }
  }
#pragma unroll
  for (int v = 0; v < kGroupedVecs; ++v)
#pragma unroll
    for (int r = 0; r < kGroupedRowsPerWarp; ++r) sums[v][r] = warp_sum(sums[v][r]);
}

// Block (expert e, tile of kWarps * 2 activations): act_perm[r, j] for e's rows r.
template <bool kClamp>
__global__ void __launch_bounds__(kWarps * 32)
    grouped_gate_up_kernel(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                           int64_t hidden, int64_t inter, Fp8Rows gate_up, float swiglu_limit,
                           __nv_bfloat16* act_perm) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [kGroupedVecs, hidden]
  constexpr int kActs = kGroupedRowsPerWarp / 2;
  const int64_t e = blockIdx.x;
  const int begin = offsets[e], end = offsets[e + 1];
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * kActs;
  const RowOf w{gate_up, hidden};
  int64_t rows[kGroupedRowsPerWarp];
  for (int a = 0; a < kActs; ++a) {  // (rows past inter read the last one; their sums are not stored)
    const int64_t j = first + a < inter ? first + a : inter - 1;
    rows[a] = e * 2 * inter + j, rows[kActs + a] = e * 2 * inter + inter + j;
  }
  for (int chunk = begin; chunk < end; chunk += kGroupedVecs) {
    const int count = end - chunk < kGroupedVecs ? end - chunk : kGroupedVecs;
    load_chunk(x, [&](int64_t v) { return static_cast<int64_t>(token_of_row[chunk + v]); }, count, hidden, hidden, xs);
    if (first >= inter) continue;
    float sums[kGroupedVecs][kGroupedRowsPerWarp];
    dot_rows(w, rows, static_cast<int>(hidden), xs, hidden, count, sums);
    if (threadIdx.x % 32 != 0) continue;
    for (int v = 0; v < count; ++v)
      for (int a = 0; a < kActs && first + a < inter; ++a) {
        float gate = sums[v][a], up = sums[v][kActs + a];
        if constexpr (kClamp) clamp_swiglu(gate, up, swiglu_limit);
        act_perm[(chunk + v) * inter + first + a] = to_bf16(gate / (1.0f + expf(-gate)) * up);
      }
  }
}

// Block (expert e, tile of kWarps * kGroupedRowsPerWarp hidden rows): y_perm[r, i] = W_down[e] . act_perm[r] for e's
// rows r, unrounded.
__global__ void __launch_bounds__(kWarps * 32)
    grouped_down_kernel(const __nv_bfloat16* act_perm, const int32_t* offsets, int64_t hidden, int64_t inter,
                        Fp8Rows down, float* y_perm) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [kGroupedVecs, inter]
  const int64_t e = blockIdx.x;
  const int begin = offsets[e], end = offsets[e + 1];
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * kGroupedRowsPerWarp;
  const RowOf w{down, inter};
  int64_t rows[kGroupedRowsPerWarp];
  for (int r = 0; r < kGroupedRowsPerWarp; ++r) rows[r] = e * hidden + (first + r < hidden ? first + r : hidden - 1);
  for (int chunk = begin; chunk < end; chunk += kGroupedVecs) {
    const int count = end - chunk < kGroupedVecs ? end - chunk : kGroupedVecs;
    load_chunk(act_perm, [&](int64_t v) { return chunk + v; }, count, inter, inter, as);
    if (first >= hidden) continue;
    float sums[kGroupedVecs][kGroupedRowsPerWarp];
    dot_rows(w, rows, static_cast<int>(inter), as, inter, count, sums);
    if (threadIdx.x % 32 != 0) continue;
    for (int v = 0; v < count; ++v)
      for (int r = 0; r < kGroupedRowsPerWarp && first + r < hidden; ++r)
        y_perm[(chunk + v) * hidden + first + r] = sums[v][r];
  }
}

}  // namespace

bool moe_grouped_gemv_fp8_supports(int64_t hidden, int64_t inter, int64_t block) {
  return block > 0 && block % 16 == 0 && hidden % block == 0 && inter % block == 0 &&
         kGroupedVecs * std::max(hidden, inter) * static_cast<int64_t>(sizeof(__nv_bfloat16)) <= kGroupedMaxShared;
}

void moe_grouped_gemv_fp8(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows gate_up, Fp8Rows down,
                          float swiglu_limit, __nv_bfloat16* act_perm, float* y_perm, cudaStream_t stream) {
  if (num_experts == 0 || !moe_grouped_gemv_fp8_supports(hidden, inter, gate_up.block)) return;  // the caller checks
  const auto gate_up_kernel = swiglu_limit > 0.0f ? grouped_gate_up_kernel<true> : grouped_gate_up_kernel<false>;
  launch_grouped_experts(gate_up_kernel, grouped_down_kernel, kWarps * kGroupedRowsPerWarp / 2,
                         kWarps * kGroupedRowsPerWarp, kGroupedVecs, kWarps * 32, x, token_of_row, offsets,
                         num_experts, hidden, inter, gate_up, down, swiglu_limit, act_perm, y_perm, stream);
}

bool moe_gemv_fp8_supports(int64_t hidden, int64_t inter, int64_t top_k, int64_t block) {
  return block > 0 && block % 16 == 0 && hidden % block == 0 && inter % block == 0 && hidden % 16 == 0 &&
         inter % 16 == 0 && hidden * 2 <= kSharedLimit && top_k * inter * 2 <= kSharedLimit;
}

void moe_gemv_gate_up_fp8(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows gate_up, float swiglu_limit,
                          __nv_bfloat16* act, cudaStream_t stream) {
  if (tokens == 0) return;
  constexpr int rows_per_block = kWarps * kGateUpRowsPerWarp;
  const dim3 grid(static_cast<unsigned>(tokens * top_k),
                  static_cast<unsigned>((inter + rows_per_block - 1) / rows_per_block));
  const size_t shared = hidden * sizeof(__nv_bfloat16);
  // The clamp a template flag: the unclamped models' kernels stay as they are.
  launch_dependent(swiglu_limit > 0.0f ? gate_up_kernel<true> : gate_up_kernel<false>, grid, kWarps * 32, shared,
                   stream, x, ids, top_k, num_experts, hidden, inter, gate_up, swiglu_limit, act);
}

void moe_gemv_down_fp8(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens,
                       int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter, Fp8Rows down,
                       __nv_bfloat16* out, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + kWarps - 1) / kWarps));
  launch_dependent(down_kernel, grid, kWarps * 32, top_k * inter * sizeof(__nv_bfloat16), stream, act, ids, weights,
                   top_k, num_experts, hidden, inter, down, out);
}

}  // namespace deepinfer::cuda
