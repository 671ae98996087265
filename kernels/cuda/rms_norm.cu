#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rms_norm.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void add_rms_norm_kernel(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                    __nv_bfloat16* out, int64_t dim, float eps) {
  const int64_t row = blockIdx.x;
  __nv_bfloat16* res = residual + row * dim;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float v = to_float(res[i]);
    if (x != nullptr) {
      // Normalise what is stored, so the norm sees exactly the residual the next layer adds to.
      res[i] = to_bf16(v + to_float(x[row * dim + i]));
      v = to_float(res[i]);
    }
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads)
    out[row * dim + i] = to_bf16(to_float(res[i]) * inv_rms * to_float(weight[i]));
}

__global__ void rms_norm_kernel(const __nv_bfloat16* x, int64_t x_stride, const __nv_bfloat16* weight,
                                __nv_bfloat16* out, int64_t out_stride, int64_t dim, float eps) {
  const __nv_bfloat16* in = x + blockIdx.x * x_stride;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) sum_sq += to_float(in[i]) * to_float(in[i]);
  const float inv_rms = rsqrtf(block_sum(sum_sq) / static_cast<float>(dim) + eps);  // all reads done before writes
  for (int64_t i = threadIdx.x; i < dim; i += kThreads)
    out[blockIdx.x * out_stride + i] = to_bf16(to_float(in[i]) * inv_rms * to_float(weight[i]));
}

}  // namespace

void rms_norm(const __nv_bfloat16* x, int64_t x_stride, const __nv_bfloat16* weight, __nv_bfloat16* out,
              int64_t out_stride, int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, x_stride, weight, out, out_stride, dim, eps);
}

void add_rms_norm(const __nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                  __nv_bfloat16* out, int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  add_rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, residual, weight, out, dim, eps);
}

}  // namespace deepinfer::cuda
