#include "kernels/cuda/sampling.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
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
}

}  // namespace

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, out);
}

}  // namespace deepinfer::cuda
