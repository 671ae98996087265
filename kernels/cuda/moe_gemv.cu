#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_gemv.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;      // gate/up rows per warp (two dot products each)
constexpr int kDownRowsPerWarp = 1;  // hidden rows per warp: top_k dot products each, and enough blocks at batch 1

// Dot product of a bf16 weight row with a bf16 vector in shared memory, over `n` (a multiple of 8) values:
// each lane takes 16-byte pieces lane, lane + 32, ...; the warp sums.
__device__ __forceinline__ float row_dot(const __nv_bfloat16* row, const __nv_bfloat16* vec, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x % 32; i < n / 8; i += 32) {
    const uint4 w = reinterpret_cast<const uint4*>(row)[i];
    const uint4 v = reinterpret_cast<const uint4*>(vec)[i];
    const auto* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
    const auto* vp = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 a = __bfloat1622float2(wp[j]), b = __bfloat1622float2(vp[j]);
      sum += a.x * b.x + a.y * b.y;
    }
  }
  return warp_sum(sum);
}

// Block (pair p = (t, k), tile of kWarps * kRowsPerWarp rows of inter).
__global__ void gate_up_kernel(const __nv_bfloat16* x, const int32_t* ids, int64_t top_k, int64_t hidden,
                               int64_t inter, const __nv_bfloat16* gate_up, __nv_bfloat16* act) {
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
    const float gate = row_dot(w + row * hidden, xs, hidden);
    const float up = row_dot(w + (inter + row) * hidden, xs, hidden);
    if (threadIdx.x % 32 == 0) act[pair * inter + row] = to_bf16(gate / (1.0f + expf(-gate)) * up);
  }
}

// Block (token t, tile of hidden rows): every k of the token, summed in k order.
__global__ void down_kernel(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t top_k,
                            int64_t hidden, int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* out) {
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [top_k][inter]
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < top_k * inter / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(as)[i] = reinterpret_cast<const uint4*>(act + t * top_k * inter)[i];
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + warp) * kDownRowsPerWarp;
#pragma unroll
  for (int r = 0; r < kDownRowsPerWarp; ++r) {
    const int64_t row = first + r;
    if (row >= hidden) break;
    float sum = 0.0f;
    for (int64_t k = 0; k < top_k; ++k) {
      const __nv_bfloat16* w = down + static_cast<int64_t>(ids[t * top_k + k]) * hidden * inter + row * inter;
      sum += weights[t * top_k + k] * row_dot(w, as + k * inter, inter);
    }
    if (threadIdx.x % 32 == 0) out[t * hidden + row] = to_bf16(to_float(out[t * hidden + row]) + sum);
  }
}

}  // namespace

void moe_gemv_gate_up(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k, int64_t hidden,
                      int64_t inter, const __nv_bfloat16* gate_up, __nv_bfloat16* act, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens * top_k),
                  static_cast<unsigned>((inter + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp)));
  gate_up_kernel<<<grid, kWarps * 32, hidden * sizeof(__nv_bfloat16), stream>>>(x, ids, top_k, hidden, inter,
                                                                                  gate_up, act);
}

void moe_gemv_down(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens, int64_t top_k,
                   int64_t hidden, int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* out, cudaStream_t stream) {
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((hidden + kWarps * kDownRowsPerWarp - 1) / (kWarps * kDownRowsPerWarp)));
  down_kernel<<<grid, kWarps * 32, top_k * inter * sizeof(__nv_bfloat16), stream>>>(act, ids, weights, top_k, hidden,
                                                                                      inter, down, out);
}

}  // namespace deepinfer::cuda
