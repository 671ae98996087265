// The routed experts' decode projections with FP4 weights at DeepSeek-V4.1-Flash shape (384 experts, hidden 5120,
// moe_intermediate 2304, top-6): moe_gemv_gate_up_fp4 then moe_gemv_down_fp4 (moe_fp4.cuh), the pair of kernels a
// decode step runs per MoE layer, at batch sizes 1-128 with each token's 6 experts drawn uniformly (seeded).
//
//   moe_fp4_gemv_bench [--reps 20]
//
// Every expert's codes are distinct memory (3.4 GB in all, far past the 50 MB L2). Prints per batch the distinct
// experts touched, the bytes they hold (codes and scales: what a step must read at least), the median time of
// the two kernels and that byte count over it. A tensor-core form of the pair (mma.sync on fp16, the e2m1 codes
// converted through e4m3) measured no faster at batch 32-128 and slower below, limited by the L1 traffic of its
// 16-byte-per-row loads (commit be582d9's message, results/h200/v41/moe-fp4-gemv-mma-ab.txt), and was withdrawn.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "src/core/check.h"
#include "src/model/cuda/device_memory.h"

namespace {

using deepinfer::DeviceArray;
namespace cuda = deepinfer::cuda;

constexpr int64_t kExperts = 384, kHidden = 5120, kInter = 2304, kTopK = 6;

int run(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  const int64_t gate_up_values = kExperts * 2 * kInter * kHidden, down_values = kExperts * kHidden * kInter;
  DeviceArray<uint8_t> gate_up_codes(gate_up_values / 2), gate_up_scales(gate_up_values / 32),
      down_codes(down_values / 2), down_scales(down_values / 32);
  {  // 16 experts' worth of values, quantised into every expert's place
    const int64_t chunk = 16 * 2 * kInter * kHidden;
    DeviceArray<__nv_bfloat16> staging(chunk);
    cuda::fill_dummy_bf16(staging.data(), chunk, 7, 0.05f, 0.0f, cudaStreamPerThread);
    for (int64_t at = 0; at < gate_up_values; at += chunk)
      cuda::quantize_fp4_rows(staging.data(), chunk / kHidden, kHidden, gate_up_codes.data() + at / 2,
                              gate_up_scales.data() + at / 32, cudaStreamPerThread);
    for (int64_t at = 0; at < down_values; at += chunk / 2)
      cuda::quantize_fp4_rows(staging.data(), chunk / 2 / kInter, kInter, down_codes.data() + at / 2,
                              down_scales.data() + at / 32, cudaStreamPerThread);
  }
  constexpr int64_t kMaxTokens = 128;
  DeviceArray<__nv_bfloat16> x(kMaxTokens * kHidden), act(kMaxTokens * kTopK * kInter), out(kMaxTokens * kHidden);
  cuda::fill_dummy_bf16(x.data(), kMaxTokens * kHidden, 11, 1.0f, 0.0f, cudaStreamPerThread);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::mt19937 rng(5);
  const double bytes_per_expert = 3.0 * kInter * kHidden * (0.5 + 1.0 / 32);
  std::printf("%6s %8s %9s %10s %8s\n", "batch", "experts", "GB", "ms", "TB/s");
  for (int64_t tokens : {1, 8, 16, 32, 64, 128}) {
    std::vector<int32_t> ids;
    std::set<int32_t> touched;
    for (int64_t t = 0; t < tokens; ++t) {
      std::set<int32_t> mine;
      while (static_cast<int64_t>(mine.size()) < kTopK) mine.insert(static_cast<int32_t>(rng() % kExperts));
      ids.insert(ids.end(), mine.begin(), mine.end());
      touched.insert(mine.begin(), mine.end());
    }
    std::vector<float> weights(ids.size(), 1.0f / kTopK);
    auto d_ids = DeviceArray<int32_t>::from_host(ids);
    auto d_weights = DeviceArray<float>::from_host(weights);
    const double bytes = bytes_per_expert * static_cast<double>(touched.size());
    const float ms = median_ms(reps, [&] {
      cuda::moe_gemv_gate_up_fp4(x.data(), d_ids.data(), tokens, kTopK, kExperts, kHidden, kInter,
                                 {gate_up_codes.data(), gate_up_scales.data()}, 10.0f, act.data(), cudaStreamPerThread);
      cuda::moe_gemv_down_fp4(act.data(), d_ids.data(), d_weights.data(), tokens, kTopK, kExperts, kHidden, kInter,
                              {down_codes.data(), down_scales.data()}, out.data(), cudaStreamPerThread);
    });
    std::printf("%6ld %8zu %9.3f %10.3f %8.2f\n", static_cast<long>(tokens), touched.size(), bytes / 1e9, ms,
                bytes / (ms * 1e-3) / 1e12);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("moe_fp4_gemv_bench", run, argc, argv); }
