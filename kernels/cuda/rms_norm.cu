#include "kernels/cuda/rms_norm.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float value) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
  if (warp == 0)
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __shared__ float total;
  if (threadIdx.x == 0) total = value;
  __syncthreads();
  return total;
}

__global__ void add_rms_norm_kernel(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                    __nv_bfloat16* out, int64_t dim, float eps) {
  const int64_t row = blockIdx.x;
  __nv_bfloat16* res = residual + row * dim;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float v = __bfloat162float(res[i]);
    if (x != nullptr) {
      v += __bfloat162float(x[row * dim + i]);
      res[i] = __float2bfloat16(v);
    }
    // Normalise what was stored, so the norm sees exactly the residual the next layer adds to.
    const float stored = __bfloat162float(res[i]);
    sum_sq += stored * stored;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads)
    out[row * dim + i] = __float2bfloat16(__bfloat162float(res[i]) * inv_rms * __bfloat162float(weight[i]));
}

}  // namespace

void add_rms_norm(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                  __nv_bfloat16* out, int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  add_rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, residual, weight, out, dim, eps);
}

}  // namespace deepinfer::cuda
