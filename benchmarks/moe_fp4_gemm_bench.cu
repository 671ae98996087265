// The routed experts' prefill projections with FP4 weights at DeepSeek-V4.1-Flash shape (384 experts, hidden 5120,
// moe_intermediate 2304): moe_fp4_gemm (moe_fp4_gemm.cuh; stages of 32 and of 64 k) against the path it replaced,
// each group of 16 experts dequantised to bf16 and multiplied by cuBLAS in 256-row chunks, at uniform rows per
// expert (64 is a 4,096-token prefill's average with top-6, 256 a 16,384-token one's).
//
//   moe_fp4_gemm_bench [--reps 5]
//
// Prints per (projection, rows per expert, kernel) the median time of one projection over every expert and the
// rate in TFLOP/s of the rows' real products (no padding counted).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/cuda/moe_fp4_gemm.cuh"
#include "src/core/check.h"
#include "src/model/cuda/device_memory.h"

namespace {

using deepinfer::CublasHandle;
using deepinfer::DeviceArray;
namespace cuda = deepinfer::cuda;

constexpr int64_t kExperts = 384, kDequantExperts = 16, kChunk = 256;

int run(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  CublasHandle cublas;
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  for (const Shape shape : {Shape{"gate_up", 2 * 2304, 5120}, Shape{"down", 5120, 2304}}) {
    const int64_t n = shape.n, k = shape.k;
    DeviceArray<__nv_bfloat16> staging(kDequantExperts * n * k);
    DeviceArray<uint8_t> codes(kExperts * n * k / 2), scales(kExperts * n * k / 32);
    cuda::fill_dummy_bf16(staging.data(), kDequantExperts * n * k, 7, 0.05f, 0.0f, cudaStreamPerThread);
    for (int64_t e = 0; e < kExperts; e += kDequantExperts)  // the same 16 experts' values throughout
      cuda::quantize_fp4_rows(staging.data(), kDequantExperts * n, k, codes.data() + e * n * k / 2,
                              scales.data() + e * n * k / 32, cudaStreamPerThread);
    for (int64_t per_expert : {64, 256}) {
      const int64_t rows = kExperts * per_expert;
      DeviceArray<__nv_bfloat16> x(rows * k), y(rows * n);
      cuda::fill_dummy_bf16(x.data(), rows * k, 11, 1.0f, 0.0f, cudaStreamPerThread);
      std::vector<int32_t> offsets;
      for (int64_t e = 0; e <= kExperts; ++e) offsets.push_back(static_cast<int32_t>(e * per_expert));
      const std::vector<cuda::Fp4GemmTile> tiles = cuda::fp4_gemm_tiles(offsets);
      DeviceArray<int32_t> d_tiles(tiles.size() * 3);
      DI_CUDA_CHECK(cudaMemcpy(d_tiles.data(), tiles.data(), tiles.size() * sizeof(cuda::Fp4GemmTile),
                               cudaMemcpyHostToDevice));
      const auto* tile_ptr = reinterpret_cast<const cuda::Fp4GemmTile*>(d_tiles.data());
      const double tflop = 2.0 * static_cast<double>(rows) * n * k * 1e-12;
      for (int stage_k : {32, 64}) {
        const float ms = median_ms(reps, [&] {
          cuda::moe_fp4_gemm(x.data(), {codes.data(), scales.data()}, tile_ptr, static_cast<int64_t>(tiles.size()), n,
                             k, y.data(), cudaStreamPerThread, stage_k);
        });
        std::printf("%-8s %4ld rows/expert  moe_fp4_gemm (stage k %d)  %8.3f ms  %6.1f TFLOP/s\n", shape.name,
                    static_cast<long>(per_expert), stage_k, ms, tflop / (ms * 1e-3));
      }
      // The replaced path: rows padded to 256-row chunks (none needed at these counts but 64's), 16 experts at a time.
      const int64_t chunks_per_expert = (per_expert + kChunk - 1) / kChunk;
      DeviceArray<__nv_bfloat16> x_pad(kExperts * chunks_per_expert * kChunk * k),
          y_pad(kExperts * chunks_per_expert * kChunk * n);
      DeviceArray<void*> pointers(3 * kExperts * chunks_per_expert);
      const float dequant_ms = median_ms(reps, [&] {
        for (int64_t e0 = 0; e0 < kExperts; e0 += kDequantExperts) {
          cuda::dequantize_fp4_rows(codes.data() + e0 * n * k / 2, scales.data() + e0 * n * k / 32,
                                    kDequantExperts * n, k, staging.data(), cudaStreamPerThread);
          std::vector<int32_t> local;
          for (int64_t e = 0; e < kDequantExperts; ++e) local.insert(local.end(), chunks_per_expert, static_cast<int32_t>(e));
          const int64_t row0 = e0 * chunks_per_expert * kChunk;
          DI_CUBLAS_CHECK(cuda::chunked_gemm_bf16(cublas.get(), x_pad.data() + row0 * k, staging.data(),
                                                  y_pad.data() + row0 * n, local, kChunk, n, k,
                                                  pointers.data() + 3 * e0 * chunks_per_expert));
        }
      });
      std::printf("%-8s %4ld rows/expert  dequantise + cuBLAS chunks  %8.3f ms  %6.1f TFLOP/s\n", shape.name,
                  static_cast<long>(per_expert), dequant_ms, tflop / (dequant_ms * 1e-3));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("moe_fp4_gemm_bench", run, argc, argv); }
