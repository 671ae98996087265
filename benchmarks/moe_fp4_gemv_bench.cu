// The routed experts' decode projections with FP4 weights (moe_fp4.cuh), hidden 5120 and moe_intermediate 2304 as
// DeepSeek-V4.1-Flash has them, at two expert counts: the main model's 384 experts top-6 (batch 1-512 tokens) and
// DSpark's draft layers' 128 experts top-3 (16-640 tokens; 80 / 300 / 480 are 16 / 60 / 96 sequences of 5-token
// blocks). Each token's experts are drawn uniformly (seeded). Three forms of the same work, each the median of `reps` runs:
//   pairs    moe_gemv_gate_up_fp4 + moe_gemv_down_fp4: each (token, expert) pair streams its expert's rows
//   grouped  moe_route, moe_grouped_gemv_fp4 and moe_grouped_combine: the pairs sorted by expert on the device, each
//            expert streamed once for up to 4 of its pairs at a time (the same bits as pairs)
//   mma      moe_route, moe_grouped_mma_fp4 and moe_grouped_combine: the same on the tensor cores, 8 pairs at a time
//   tiles    moe_fp4_gemm twice and silu_mul over 64-row tiles of the expert-sorted rows (the prefill form; timed
//            without the permute and the host round trip for its offsets that the model pays before it)
//
//   moe_fp4_gemv_bench [--reps 20]
//
// Every expert's codes are distinct memory (3.4 GB in all, far past the 50 MB L2). Prints per (experts, batch) the
// distinct experts touched, the bytes they hold (codes and scales: what a step must read at least), and each form's
// time and that byte count over it. A tensor-core form of the pair (mma.sync on fp16, the e2m1 codes converted
// through e4m3) measured no faster at batch 32-128 and slower below, limited by the L1 traffic of its 16-byte-per-row
// loads (commit be582d9's message, results/h200/v41/moe-fp4-gemv-mma-ab.txt), and was withdrawn.
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
#include "kernels/cuda/moe_fp4_gemm.cuh"
#include "kernels/cuda/moe_permute.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "src/core/check.h"
#include "src/model/cuda/device_memory.h"

namespace {

using deepinfer::DeviceArray;
namespace cuda = deepinfer::cuda;

constexpr int64_t kMaxExperts = 384, kHidden = 5120, kInter = 2304, kMaxPairs = 512 * 6;

int run(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  const int64_t gate_up_values = kMaxExperts * 2 * kInter * kHidden, down_values = kMaxExperts * kHidden * kInter;
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
  const cuda::Fp4Rows gate_up{gate_up_codes.data(), gate_up_scales.data()}, down{down_codes.data(), down_scales.data()};
  constexpr int64_t kMaxTokens = 640;
  DeviceArray<__nv_bfloat16> x(kMaxTokens * kHidden), act(kMaxPairs * kInter), out(kMaxTokens * kHidden),
      x_perm(kMaxPairs * kHidden), gate_up_rows(kMaxPairs * 2 * kInter), y_rows(kMaxPairs * kHidden);
  DeviceArray<float> y_perm(kMaxPairs * kHidden);
  DeviceArray<int32_t> row_of(kMaxPairs), token_of_row(kMaxPairs), offsets(kMaxExperts + 1);
  cuda::fill_dummy_bf16(x.data(), kMaxTokens * kHidden, 11, 1.0f, 0.0f, cudaStreamPerThread);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::mt19937 rng(5);
  const double bytes_per_expert = 3.0 * kInter * kHidden * (0.5 + 1.0 / 32);
  std::printf("%7s %6s %8s %8s %9s %7s %8s %7s %8s %7s %8s %7s\n", "experts", "batch", "touched", "GB", "pairs ms",
              "TB/s", "grouped", "TB/s", "mma", "TB/s", "tiles ms", "TB/s");
  struct Shape {
    int64_t experts, top_k;
    std::vector<int64_t> batches;
  };
  for (const Shape& shape : {Shape{384, 6, {1, 8, 16, 32, 64, 128, 192, 256, 384, 512}},
                            Shape{128, 3, {16, 80, 160, 220, 300, 480, 640}}}) {
    const int64_t E = shape.experts, K = shape.top_k;
    for (int64_t tokens : shape.batches) {
      std::vector<int32_t> ids;
      std::set<int32_t> touched;
      for (int64_t t = 0; t < tokens; ++t) {
        std::set<int32_t> mine;
        while (static_cast<int64_t>(mine.size()) < K) mine.insert(static_cast<int32_t>(rng() % E));
        ids.insert(ids.end(), mine.begin(), mine.end());
        touched.insert(mine.begin(), mine.end());
      }
      const int64_t n = tokens * K;
      std::vector<float> weights(ids.size(), 1.0f / K);
      auto d_ids = DeviceArray<int32_t>::from_host(ids);
      auto d_weights = DeviceArray<float>::from_host(weights);
      const double bytes = bytes_per_expert * static_cast<double>(touched.size());
      const float pairs_ms = median_ms(reps, [&] {
        cuda::moe_gemv_gate_up_fp4(x.data(), d_ids.data(), tokens, K, E, kHidden, kInter, gate_up, 10.0f, act.data(),
                                   cudaStreamPerThread);
        cuda::moe_gemv_down_fp4(act.data(), d_ids.data(), d_weights.data(), tokens, K, E, kHidden, kInter, down,
                                out.data(), cudaStreamPerThread);
      });
      // A grouped form (both take the same arguments): the sort, the projections, the sum.
      const auto grouped_form_ms = [&](auto form) {
        return median_ms(reps, [&] {
          cuda::moe_route(d_ids.data(), tokens, K, E, row_of.data(), token_of_row.data(), offsets.data(),
                          cudaStreamPerThread);
          form(x.data(), token_of_row.data(), offsets.data(), E, kHidden, kInter, gate_up, down, 10.0f, act.data(),
               y_perm.data(), cudaStreamPerThread);
          cuda::moe_grouped_combine(y_perm.data(), d_ids.data(), row_of.data(), d_weights.data(), tokens, K, E,
                                    kHidden, out.data(), cudaStreamPerThread);
        });
      };
      const float grouped_ms = grouped_form_ms(cuda::moe_grouped_gemv_fp4);
      const float mma_ms = grouped_form_ms(cuda::moe_grouped_mma_fp4);
      // The tiles over the same expert-sorted rows (x_perm's values do not matter to the time).
      cuda::moe_route(d_ids.data(), tokens, K, E, row_of.data(), token_of_row.data(), offsets.data(),
                      cudaStreamPerThread);
      std::vector<int32_t> host_offsets(E + 1);
      DI_CUDA_CHECK(cudaMemcpy(host_offsets.data(), offsets.data(), (E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost));
      const std::vector<cuda::Fp4GemmTile> tiles = cuda::fp4_gemm_tiles(host_offsets);
      DeviceArray<int32_t> d_tiles(tiles.size() * 3);
      DI_CUDA_CHECK(cudaMemcpy(d_tiles.data(), tiles.data(), tiles.size() * sizeof(cuda::Fp4GemmTile),
                               cudaMemcpyHostToDevice));
      const auto* tile_list = reinterpret_cast<const cuda::Fp4GemmTile*>(d_tiles.data());
      const auto num_tiles = static_cast<int64_t>(tiles.size());
      const float tiles_ms = median_ms(reps, [&] {
        cuda::moe_fp4_gemm(x_perm.data(), gate_up, tile_list, num_tiles, 2 * kInter, kHidden, gate_up_rows.data(),
                           cudaStreamPerThread);
        cuda::silu_mul(gate_up_rows.data(), act.data(), n, kInter, 10.0f, cudaStreamPerThread);
        cuda::moe_fp4_gemm(act.data(), down, tile_list, num_tiles, kHidden, kInter, y_rows.data(), cudaStreamPerThread);
      });
      const auto rate = [&](float ms) { return bytes / (ms * 1e-3) / 1e12; };
      std::printf("%7ld %6ld %8zu %8.3f %9.3f %7.2f %8.3f %7.2f %8.3f %7.2f %8.3f %7.2f\n", static_cast<long>(E),
                  static_cast<long>(tokens), touched.size(), bytes / 1e9, pairs_ms, rate(pairs_ms), grouped_ms,
                  rate(grouped_ms), mma_ms, rate(mma_ms), tiles_ms, rate(tiles_ms));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("moe_fp4_gemv_bench", run, argc, argv); }
