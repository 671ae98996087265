// The decode step's dense projections at DeepSeek-V2-Lite shape, alone: linear_skinny (linear_skinny.cuh)
// against cuBLAS (gemm.cuh's linear_bf16) and, up to 8 rows, linear_gemv, at decode batch sizes, with the
// weight rate each reaches.
//
//   linear_bench [--reps 20]
//
// Each shape is run over enough copies of its weight (>= 256 MB, one launch a copy, back to back) that the
// weights come from memory, not from the 50 MB L2, as they do in a step that walks through 27 layers. Prints
// per launch the median over --reps rounds (after 3 warm-up rounds) of the round's time / copies, the bytes a
// launch must read (weights and x) and the rate, and the largest relative difference between the two outputs.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "src/core/check.h"
#include "src/model/cuda/device_memory.h"

namespace {

// Median over `reps` rounds of (a round's time / launches), after 3 warm-up rounds.
template <class F>
float median_us(int reps, int launches, F round) {
  return median_ms(reps, round) * 1e3f / static_cast<float>(launches);
}

__global__ void fill_kernel(__nv_bfloat16* data, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    data[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
  }
}

struct Shape {
  const char* name;
  int64_t n, k;
};

int run(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "linear_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, sms);
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(blas, cudaStreamPerThread) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cuBLAS did not start");

  const Shape shapes[] = {{"q + kv_a", 3648, 2048},        {"o_proj", 2048, 2048},
                          {"shared gate_up", 5632, 2048},   {"shared down", 2048, 2816},
                          {"dense gate_up", 21888, 2048},   {"dense down", 2048, 10944},
                          {"lm_head (fp32 out)", 102400, 2048}};
  constexpr size_t kMinBytes = 256ull << 20;
  constexpr int64_t kMaxRows = deepinfer::cuda::kLinearSkinnyMaxRows;
  std::printf("%-20s %4s %-8s %9s %9s %8s %10s\n", "shape", "m", "kernel", "us", "MB", "TB/s", "max rel diff");
  for (const Shape& s : shapes) {
    const size_t weight_bytes = static_cast<size_t>(s.n) * s.k * 2;
    const int copies = static_cast<int>(std::max<size_t>(1, (kMinBytes + weight_bytes - 1) / weight_bytes));
    __nv_bfloat16 *w, *x, *y_skinny, *y_blas;
    DI_CUDA_CHECK(cudaMalloc(&w, weight_bytes * copies));
    DI_CUDA_CHECK(cudaMalloc(&x, kMaxRows * s.k * 2));
    DI_CUDA_CHECK(cudaMalloc(&y_skinny, kMaxRows * s.n * 4));
    DI_CUDA_CHECK(cudaMalloc(&y_blas, kMaxRows * s.n * 4));
    fill_kernel<<<4 * sms, 256>>>(w, weight_bytes / 2 * copies, 1u);
    fill_kernel<<<sms, 256>>>(x, kMaxRows * s.k, 2u);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const bool fp32 = s.n > 100000;
    for (int64_t m : {1, 2, 4, 8, 16, 32, 64}) {
      auto weight = [&](int c) { return w + static_cast<size_t>(c) * s.n * s.k; };
      const float skinny_us = median_us(reps, copies, [&] {
        for (int c = 0; c < copies; ++c)
          deepinfer::cuda::linear_skinny(x, weight(c), y_skinny, fp32, m, s.n, s.k, sms, cudaStreamPerThread);
      });
      const float blas_us = median_us(reps, copies, [&] {
        for (int c = 0; c < copies; ++c)
          DI_CUBLAS_CHECK(deepinfer::cuda::linear_bf16(blas, x, weight(c), y_blas, fp32, m, s.n, s.k));
      });
      const float gemv_us = m > deepinfer::cuda::kLinearGemvMaxRows ? 0.0f : median_us(reps, copies, [&] {
        for (int c = 0; c < copies; ++c)
          deepinfer::cuda::linear_gemv(x, weight(c), y_blas, fp32, m, s.n, s.k, cudaStreamPerThread);
      });
      // Both outputs of the last copy, compared (as floats).
      const size_t count = static_cast<size_t>(m) * s.n;
      std::vector<float> a, b;
      if (fp32) {
        a.resize(count), b.resize(count);
        DI_CUDA_CHECK(cudaMemcpy(a.data(), y_skinny, count * 4, cudaMemcpyDeviceToHost));
        DI_CUDA_CHECK(cudaMemcpy(b.data(), y_blas, count * 4, cudaMemcpyDeviceToHost));
      } else {
        a = to_host_float(y_skinny, count), b = to_host_float(y_blas, count);
      }
      const double rel_diff = max_relative_difference(a, b);
      const double bytes = static_cast<double>(weight_bytes) + static_cast<double>(m) * s.k * 2;
      std::printf("%-20s %4ld %-8s %9.2f %9.2f %8.2f\n", s.name, static_cast<long>(m), "skinny", skinny_us,
                  bytes / 1e6, bytes / (skinny_us * 1e-6) / 1e12);
      std::printf("%-20s %4ld %-8s %9.2f %9.2f %8.2f %10.2e\n", s.name, static_cast<long>(m), "cublas", blas_us,
                  bytes / 1e6, bytes / (blas_us * 1e-6) / 1e12, rel_diff);
      if (gemv_us > 0.0f)
        std::printf("%-20s %4ld %-8s %9.2f %9.2f %8.2f\n", s.name, static_cast<long>(m), "gemv", gemv_us,
                    bytes / 1e6, bytes / (gemv_us * 1e-6) / 1e12);
    }
    DI_CUDA_CHECK(cudaFree(w));
    DI_CUDA_CHECK(cudaFree(x));
    DI_CUDA_CHECK(cudaFree(y_skinny));
    DI_CUDA_CHECK(cudaFree(y_blas));
  }
  // MLA's unabsorb at decode: per head, the latent output [m, 512] times W_uv [128, 512]^T, in kv_b's layout
  // ([heads, nope + v, lora]: W_uv is each head's last v rows), as the model calls it.
  {
    constexpr int64_t heads = 16, nope = 128, v = 128, lora = 512;
    const size_t kv_b_bytes = static_cast<size_t>(heads) * (nope + v) * lora * 2;
    const int copies = static_cast<int>((kMinBytes + kv_b_bytes - 1) / kv_b_bytes);
    __nv_bfloat16 *kv_b, *x, *y;
    DI_CUDA_CHECK(cudaMalloc(&kv_b, kv_b_bytes * copies));
    DI_CUDA_CHECK(cudaMalloc(&x, kMaxRows * heads * lora * 2));
    DI_CUDA_CHECK(cudaMalloc(&y, kMaxRows * heads * v * 2));
    fill_kernel<<<4 * sms, 256>>>(kv_b, kv_b_bytes / 2 * copies, 3u);
    fill_kernel<<<sms, 256>>>(x, kMaxRows * heads * lora, 4u);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const deepinfer::cuda::GemvLayout layout{heads * lora, lora, (nope + v) * lora, heads * v, v, lora};
    for (int64_t m : {4, 8, 16, 32, 64}) {
      auto w_uv = [&](int c) { return kv_b + static_cast<size_t>(c) * kv_b_bytes / 2 + nope * lora; };
      const float skinny_us = median_us(reps, copies, [&] {
        for (int c = 0; c < copies; ++c)
          deepinfer::cuda::batched_linear_skinny(x, w_uv(c), y, heads, m, v, lora, layout, sms, cudaStreamPerThread);
      });
      const float blas_us = median_us(reps, copies, [&] {
        for (int c = 0; c < copies; ++c)
          DI_CUBLAS_CHECK(deepinfer::cuda::gemm_bf16(blas, m, v, lora, {x, heads * lora, lora},
                                                   {w_uv(c), lora, (nope + v) * lora}, true, y, heads * v, v, false,
                                                   heads));
      });
      const double bytes = static_cast<double>(heads) * v * lora * 2 + static_cast<double>(m) * heads * lora * 2;
      std::printf("%-20s %4ld %-8s %9.2f %9.2f %8.2f\n", "unabsorb (W_uv)", static_cast<long>(m), "skinny", skinny_us,
                  bytes / 1e6, bytes / (skinny_us * 1e-6) / 1e12);
      std::printf("%-20s %4ld %-8s %9.2f %9.2f %8.2f\n", "unabsorb (W_uv)", static_cast<long>(m), "cublas", blas_us,
                  bytes / 1e6, bytes / (blas_us * 1e-6) / 1e12);
    }
    DI_CUDA_CHECK(cudaFree(kv_b));
    DI_CUDA_CHECK(cudaFree(x));
    DI_CUDA_CHECK(cudaFree(y));
  }
  cublasDestroy(blas);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("linear_bench", run, argc, argv); }
