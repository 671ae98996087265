#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_gemv.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kDownRowsPerWarp = 1;  // hidden rows per warp: top_k dot products each, and enough blocks at batch 1

// Loads a lane keeps in flight (kBatch: 16-byte pieces of each of two rows) and gate/up rows a warp takes. One
// token: 8 pieces (a 2048-wide row in one round trip) and 2 rows a warp; more tokens: 4 and 4, which measured
// faster above one token (results/h200/design-measurements.md).
constexpr int kOneTokenBatch = 8, kOneTokenRowsPerWarp = 2, kTokensBatch = 4, kTokensRowsPerWarp = 4;

// Dot products of two bf16 weight rows with two bf16 vectors in shared memory, over `n` (a multiple of 8)
// values: each lane takes 16-byte pieces lane, lane + 32, ...; kBatch pieces of both rows are loaded before
// any is used, so 2 x kBatch loads a lane are in flight (one at a time had held these kernels near 2 TB/s). The
// warp sums. row1 may be null (then its sum is 0).
template <int kBatch>
__device__ __forceinline__ float2 dot_pair(const __nv_bfloat16* row0, const __nv_bfloat16* vec0,
                                           const __nv_bfloat16* row1, const __nv_bfloat16* vec1, int n) {
  const int lane = threadIdx.x % 32, pieces = n / 8;
  float sum0 = 0.0f, sum1 = 0.0f;
  for (int base = lane; base < pieces; base += 32 * kBatch) {
    uint4 w0[kBatch], w1[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + 32 * u;
      w0[u] = i < pieces ? reinterpret_cast<const uint4*>(row0)[i] : uint4{};
      w1[u] = i < pieces && row1 != nullptr ? reinterpret_cast<const uint4*>(row1)[i] : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + 32 * u;
      if (i >= pieces) break;
      sum0 += dot8(w0[u], reinterpret_cast<const uint4*>(vec0)[i]);
      sum1 += dot8(w1[u], reinterpret_cast<const uint4*>(vec1)[i]);
    }
  }
  return {warp_sum(sum0), warp_sum(sum1)};
}

// Block (pair p = (t, k), tile of kWarps * kRowsPerWarp rows of inter).
template <int kBatch, int kRowsPerWarp, bool kClamp>
__global__ void gate_up_kernel(const __nv_bfloat16* x, const int32_t* ids, int64_t top_k, int64_t hidden,
                               int64_t inter, const __nv_bfloat16* gate_up, float swiglu_limit,
                               __nv_bfloat16* act) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [hidden]
  const int64_t pair = blockIdx.x, t = pair / top_k;
  for (int64_t i = threadIdx.x; i < hidden / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x + t * hidden)[i];
  __syncthreads();
  const __nv_bfloat16* w = gate_up + static_cast<int64_t>(ids[pair]) * 2 * inter * hidden;
  const int warp = threadIdx.x / 32;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kRowsPerWarp;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = first + r;
    if (row >= inter) break;
    const float2 gate_up_dots =
        dot_pair<kBatch>(w + row * hidden, xs, w + (inter + row) * hidden, xs, static_cast<int>(hidden));
    float gate = gate_up_dots.x, up = gate_up_dots.y;
    if constexpr (kClamp) clamp_swiglu(gate, up, swiglu_limit);
    if (threadIdx.x % 32 == 0) act[pair * inter + row] = to_bf16(gate / (1.0f + expf(-gate)) * up);
  }
}

// Block (token t, tile of hidden rows): every k of the token, summed in k order, added onto out.
template <int kBatch>
__global__ void down_kernel(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t top_k,
                            int64_t hidden, int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [top_k][inter]
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < top_k * inter / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(as)[i] = reinterpret_cast<const uint4*>(act + t * top_k * inter)[i];
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kDownRowsPerWarp;
  auto weight_row = [&](int64_t k, int64_t row) {
    return down + static_cast<int64_t>(ids[t * top_k + k]) * hidden * inter + row * inter;
  };
  auto weight_of = [&](int64_t k) { return weights[t * top_k + k]; };
#pragma unroll
  for (int r = 0; r < kDownRowsPerWarp; ++r) {
    const int64_t row = first + r;
    if (row >= hidden) break;
    float sum = 0.0f;
    for (int64_t k = 0; k < top_k; k += 2) {  // two experts' rows in flight at once
      const bool second = k + 1 < top_k;
      const float2 dots = dot_pair<kBatch>(weight_row(k, row), as + k * inter,
                                           second ? weight_row(k + 1, row) : nullptr,
                                           as + (second ? k + 1 : k) * inter, static_cast<int>(inter));
      sum += weight_of(k) * dots.x;
      if (second) sum += weight_of(k + 1) * dots.y;
    }
    if (threadIdx.x % 32 == 0) out[t * hidden + row] = to_bf16(to_float(out[t * hidden + row]) + sum);
  }
}

}  // namespace

void moe_gemv_gate_up(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k, int64_t hidden,
                      int64_t inter, const __nv_bfloat16* gate_up, float swiglu_limit, __nv_bfloat16* act,
                      cudaStream_t stream) {
  if (tokens == 0) return;
  const auto run = [&](auto kernel, int rows_per_warp) {
    const int rows_per_block = kWarps * rows_per_warp;
    const dim3 grid(static_cast<unsigned>(tokens * top_k),
                    static_cast<unsigned>((inter + rows_per_block - 1) / rows_per_block));
    launch_dependent(kernel, grid, kWarps * 32, hidden * sizeof(__nv_bfloat16), stream, x, ids, top_k, hidden, inter,
                     gate_up, swiglu_limit, act);
  };
  // The clamp a template flag: the unclamped models' kernels stay as they were.
  const bool clamp = swiglu_limit > 0.0f;
  if (tokens == 1)
    return clamp ? run(gate_up_kernel<kOneTokenBatch, kOneTokenRowsPerWarp, true>, kOneTokenRowsPerWarp)
                 : run(gate_up_kernel<kOneTokenBatch, kOneTokenRowsPerWarp, false>, kOneTokenRowsPerWarp);
  if (clamp) run(gate_up_kernel<kTokensBatch, kTokensRowsPerWarp, true>, kTokensRowsPerWarp);
  else run(gate_up_kernel<kTokensBatch, kTokensRowsPerWarp, false>, kTokensRowsPerWarp);
}

void moe_gemv_down(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens, int64_t top_k,
                   int64_t hidden, int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* out, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((hidden + kWarps * kDownRowsPerWarp - 1) / (kWarps * kDownRowsPerWarp)));
  const size_t shared = top_k * inter * sizeof(__nv_bfloat16);
  launch_dependent(tokens == 1 ? down_kernel<kOneTokenBatch> : down_kernel<kTokensBatch>, grid, kWarps * 32, shared,
                   stream, act, ids, weights, top_k, hidden, inter, down, out);
}

}  // namespace deepinfer::cuda
