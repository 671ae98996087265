// DeepSeek-V3's FP8 Linear layers at prefill row counts, alone: the FP8 GEMM (kernels/cuda/fp8_gemm.cuh: the rows
// quantised per token and 128 channels, then CUTLASS's block-scaled FP8 kernel) against the path it replaces (the
// weight dequantised into scratch, then cuBLAS's bf16 GEMM) and against cuBLAS's bf16 GEMM alone on a resident bf16
// weight (what a model that held bf16 weights would pay).
//
//   fp8_gemm_bench [--reps 20] [--rows 128,512,4096,16384]
//
// Prints per shape and row count the median microseconds of each, its TFLOP/s (2 m n k over the time), and the
// largest difference between the FP8 GEMM's and cuBLAS's outputs relative to the largest output. Ceilings on the
// H200: 782 TFLOP/s bf16 (measured, ../shared/device/README.md); FP8's dense peak is twice bf16's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/gemm.cuh"
#include "src/core/check.h"
#include "src/model/cuda/device_memory.h"

namespace {

using deepinfer::CublasHandle;
using deepinfer::DeviceArray;
namespace cuda = deepinfer::cuda;

std::vector<int64_t> parse_rows(const std::string& text) {
  std::vector<int64_t> rows;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) rows.push_back(std::stoll(item));
  return rows;
}

int run(int argc, char** argv) {
  int reps = 20;
  std::vector<int64_t> row_counts = {128, 512, 4096, 16384};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--rows") row_counts = parse_rows(argv[i + 1]);
  }
  CublasHandle blas;  // on this thread's stream
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  // V3's projections whose shapes the FP8 GEMM takes (q_a + kv_a stacked, 2,112 rows, does not: not a multiple of
  // 128), its dense layers' MLP and an expert's.
  const Shape shapes[] = {{"q_b", 24576, 1536},         {"o_proj", 7168, 16384},     {"dense gate_up", 36864, 7168},
                          {"dense down", 7168, 18432},  {"expert gate_up", 4096, 7168}, {"expert down", 7168, 2048}};
  constexpr int64_t kBlock = cuda::kFp8GemmGroup;
  std::printf("%-16s %6s %-22s %10s %9s %12s\n", "shape", "m", "path", "us", "TFLOP/s", "max rel diff");
  for (const Shape& s : shapes) {
    const int64_t max_m = *std::max_element(row_counts.begin(), row_counts.end());
    DeviceArray<__nv_bfloat16> w(s.n * s.k), dequantised(s.n * s.k), x(max_m * s.k), y_fp8(max_m * s.n),
        y_blas(max_m * s.n);
    DeviceArray<uint8_t> codes(s.n * s.k), x_codes(max_m * s.k);
    DeviceArray<float> scales(s.n / kBlock * (s.k / kBlock)),
        x_scales(cuda::fp8_activation_scale_stride(max_m) * (s.k / kBlock));
    cuda::fill_dummy_bf16(w.data(), s.n * s.k, 7, 0.05f, 0.0f, cudaStreamPerThread);
    cuda::fill_dummy_bf16(x.data(), max_m * s.k, 11, 1.0f, 0.0f, cudaStreamPerThread);
    cuda::quantize_fp8_scaled(w.data(), s.n, s.k, kBlock, codes.data(), scales.data(), cudaStreamPerThread);
    const cuda::Fp8BlockScales grid = cuda::Fp8BlockScales::fp32(scales.data(), kBlock);
    for (int64_t m : row_counts) {
      if (!cuda::fp8_gemm_supports(m, s.n, s.k, grid, s.n)) {
        std::printf("%-16s %6ld the FP8 GEMM does not take this shape on this GPU\n", s.name, static_cast<long>(m));
        continue;
      }
      DeviceArray<uint8_t> workspace(std::max<size_t>(1, cuda::fp8_gemm_workspace_bytes(m, s.n, s.k)));
      const float fp8_ms = median_ms(reps, [&] {
        cuda::quantize_fp8_activations(x.data(), s.k, m, s.k, x_codes.data(), x_scales.data(), cudaStreamPerThread);
        DI_CHECK(cuda::fp8_gemm(x_codes.data(), x_scales.data(), codes.data(), scales.data(), y_fp8.data(), s.n, m,
                                s.n, s.k, workspace.data(), workspace.size(), cudaStreamPerThread),
                 "the FP8 GEMM refused {} x {} x {}", m, s.n, s.k);
      });
      const float gemm_only_ms = median_ms(reps, [&] {
        DI_CHECK(cuda::fp8_gemm(x_codes.data(), x_scales.data(), codes.data(), scales.data(), y_fp8.data(), s.n, m,
                                s.n, s.k, workspace.data(), workspace.size(), cudaStreamPerThread),
                 "the FP8 GEMM refused");
      });
      const float dequant_ms = median_ms(reps, [&] {
        cuda::dequantize_fp8_blocks(codes.data(), grid, s.n, s.k, dequantised.data(), cudaStreamPerThread);
        DI_CUBLAS_CHECK(cuda::linear_bf16(blas.get(), x.data(), dequantised.data(), y_blas.data(), false, m, s.n, s.k));
      });
      const float bf16_ms = median_ms(reps, [&] {
        DI_CUBLAS_CHECK(cuda::linear_bf16(blas.get(), x.data(), dequantised.data(), y_blas.data(), false, m, s.n, s.k));
      });
      const std::vector<float> a = to_host_float(y_fp8.data(), m * s.n), b = to_host_float(y_blas.data(), m * s.n);
      const double rel_diff = max_relative_difference(a, b);
      const double flops = 2.0 * static_cast<double>(m) * s.n * s.k;
      auto line = [&](const char* path, float ms, bool diff) {
        std::printf("%-16s %6ld %-22s %10.1f %9.1f", s.name, static_cast<long>(m), path, ms * 1e3, flops / (ms * 1e9));
        if (diff) std::printf(" %12.2e", rel_diff);
        std::printf("\n");
      };
      line("quantise + FP8 GEMM", fp8_ms, true);
      line("FP8 GEMM alone", gemm_only_ms, false);
      line("dequantise + cuBLAS", dequant_ms, false);
      line("cuBLAS bf16 alone", bf16_ms, false);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("fp8_gemm_bench", run, argc, argv); }
