#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.cuh"

namespace deepinfer::cuda {

namespace {

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_float(in[i]);
}

__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_bf16(in[i]);
}

__global__ void add_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = to_bf16(to_float(y[i]) + x[i]);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

void bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream) {
  if (n > 0) bf16_to_f32_kernel<<<blocks_for(n), 256, 0, stream>>>(in, out, n);
}

void f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  if (n > 0) f32_to_bf16_kernel<<<blocks_for(n), 256, 0, stream>>>(in, out, n);
}

void add_f32_into_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  if (n > 0) add_kernel<<<blocks_for(n), 256, 0, stream>>>(x, y, n);
}

}  // namespace deepinfer::cuda
