// DeepSeek-V4.1-Flash's FP8 projections at decode batch sizes, alone: the kernels that read the codes as stored
// (linear_gemv_fp8 up to 8 rows, linear_skinny_fp8 up to 64) against the path the skinny one replaced past 8 rows,
// the weight dequantised into scratch and multiplied by cuBLAS (5 bytes moved a weight instead of 1); up to 8 rows
// both FP8 kernels.
//
//   fp8_linear_bench [--reps 20]
//
// Each shape runs over enough copies of its weight (>= 256 MB) that the codes come from memory, not from L2.
// Prints per launch the median over --reps rounds of the round's time / copies, the bytes a launch must read
// (codes, scales and x), the rate, and the largest difference between the skinny and the cuBLAS outputs relative
// to the largest output.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "src/core/check.h"
#include "src/model/cuda/device_memory.h"

namespace {

using deepinfer::CublasHandle;
using deepinfer::DeviceArray;
namespace cuda = deepinfer::cuda;

int run(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CublasHandle blas;  // on this thread's stream
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"wq_a + wkv", 1792, 5120},      {"wq_b", 32768, 1280},
                          {"wo_a (one group)", 1024, 4096}, {"wo_b", 5120, 8192},
                          {"shared gate_up", 4608, 5120},   {"shared down", 5120, 2304}};
  constexpr size_t kMinBytes = 256ull << 20;
  constexpr int64_t kMaxRows = cuda::kLinearSkinnyMaxRows;
  std::printf("%-18s %4s %-22s %9s %9s %8s %12s\n", "shape", "m", "kernel", "us", "MB", "TB/s", "max rel diff");
  for (const Shape& s : shapes) {
    const size_t codes_bytes = static_cast<size_t>(s.n) * s.k, scale_bytes = codes_bytes / 1024;
    const int copies = static_cast<int>(std::max<size_t>(1, (kMinBytes + codes_bytes - 1) / codes_bytes));
    DeviceArray<__nv_bfloat16> staging(s.n * s.k), x(kMaxRows * s.k), y_fp8(kMaxRows * s.n), y_blas(kMaxRows * s.n),
        scratch(s.n * s.k);
    DeviceArray<uint8_t> codes(codes_bytes * copies), scales(scale_bytes * copies);
    cuda::fill_dummy_bf16(staging.data(), s.n * s.k, 7, 0.05f, 0.0f, cudaStreamPerThread);
    cuda::fill_dummy_bf16(x.data(), kMaxRows * s.k, 11, 1.0f, 0.0f, cudaStreamPerThread);
    for (int c = 0; c < copies; ++c)
      cuda::quantize_fp8_blocks(staging.data(), s.n, s.k, codes.data() + c * codes_bytes,
                                scales.data() + c * scale_bytes, cudaStreamPerThread);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t m : {1, 2, 4, 8, 16, 32, 64}) {
      auto c8 = [&](int c) { return codes.data() + c * codes_bytes; };
      auto s8 = [&](int c) { return scales.data() + c * scale_bytes; };
      const float gemv_us = m > cuda::kLinearGemvMaxRows ? 0.0f : 1e3f / copies * median_ms(reps, [&] {
        for (int c = 0; c < copies; ++c)
          cuda::linear_gemv_fp8(x.data(), s.k, c8(c), cuda::Fp8BlockScales::ue8m0(s8(c)), y_fp8.data(), s.n, false, m,
                                s.n, s.k, cudaStreamPerThread);
      });
      const float fp8_us = 1e3f / copies * median_ms(reps, [&] {
        for (int c = 0; c < copies; ++c)
          cuda::linear_skinny_fp8(x.data(), c8(c), cuda::Fp8BlockScales::ue8m0(s8(c)), y_fp8.data(), false, m, s.n,
                                  s.k, sms, cudaStreamPerThread);
      });
      const float blas_us = 1e3f / copies * median_ms(reps, [&] {
        for (int c = 0; c < copies; ++c) {
          cuda::dequantize_fp8_blocks(c8(c), cuda::Fp8BlockScales::ue8m0(s8(c)), s.n, s.k, scratch.data(),
                                      cudaStreamPerThread);
          DI_CUBLAS_CHECK(cuda::linear_bf16(blas.get(), x.data(), scratch.data(), y_blas.data(), false, m, s.n, s.k));
        }
      });
      const std::vector<float> a = to_host_float(y_fp8.data(), m * s.n), b = to_host_float(y_blas.data(), m * s.n);
      const double rel_diff = max_relative_difference(a, b);
      const double bytes = static_cast<double>(codes_bytes + scale_bytes) + static_cast<double>(m) * s.k * 2;
      std::printf("%-18s %4ld %-22s %9.2f %9.2f %8.2f %12.2e\n", s.name, static_cast<long>(m), "linear_skinny_fp8", fp8_us,
                  bytes / 1e6, bytes / (fp8_us * 1e-6) / 1e12, rel_diff);
      if (gemv_us > 0.0f)
        std::printf("%-18s %4ld %-22s %9.2f %9.2f %8.2f\n", s.name, static_cast<long>(m), "linear_gemv_fp8", gemv_us,
                    bytes / 1e6, bytes / (gemv_us * 1e-6) / 1e12);
      std::printf("%-18s %4ld %-22s %9.2f %9.2f %8.2f\n", s.name, static_cast<long>(m), "dequantise + cuBLAS", blas_us,
                  bytes / 1e6, bytes / (blas_us * 1e-6) / 1e12);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("fp8_linear_bench", run, argc, argv); }
