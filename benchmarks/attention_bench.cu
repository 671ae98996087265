// The decode attention kernels alone, at the shapes FlashMLA's SM90 decode kernels are compared at (the peer is built
// from its public source on the GPU machine, outside this repository: results/h200/v41/README.md says how):
//  - dense: V2/V3's MLA decode (cuda::mla_decode_attention: latent 512 + rope 64 in bf16, 64-token pages), 16 and
//    128 heads, batch 1-256, context 1K, 4K and 32K (up to 1M cached keys in all), the KV splits chosen as the model
//    does (cuda::mla_decode_splits); at 128 heads the warpgroup-MMA kernels (both warpgroups on each tile, and on
//    alternate tiles: "seesaw") and the mma.sync kernel side by side;
//  - sparse: V4.1's attention (cuda::sparse_window_attention: 64 heads of 512, the window of 128 FP8 entries + 512
//    selected compressed entries in bf16, per-head sinks), batch 1-256;
//  - prefill: V3's MLA prefill (cuda::mla_prefill_attention: q.k 192, v 128, 128 heads, causal), one sequence of 1K,
//    4K and 16K tokens, every kernel (TFLOP/s over the causal half).
// Prints one JSON line a point: the median of 30 launches after 5, the bytes the kernel must read (cache entries
// touched, q and out), the rate.
//
//   attention_bench                                  every point
//   attention_bench --dense HEADS BATCH CONTEXT      one dense point, every kernel (for a profiler)
//   attention_bench --prefill TOKENS                 one prefill point, every kernel
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_decode_seesaw.cuh"
#include "kernels/cuda/mla_decode_wgmma.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/mla_prefill_tma.cuh"
#include "kernels/cuda/mla_prefill_wgmma.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "src/core/device_array.h"

namespace {

using deepinfer::DeviceArray;
namespace cuda = deepinfer::cuda;
using Bf16 = __nv_bfloat16;

int num_sms() {
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

const char* kernel_name(cuda::MlaDecodeKernel kernel, int64_t heads, int64_t latent, int64_t rope) {
  if (kernel == cuda::MlaDecodeKernel::kSeesaw && cuda::mla_decode_seesaw_supports(heads, latent, rope, 0))
    return "seesaw";
  if (kernel != cuda::MlaDecodeKernel::kMmaSync && cuda::mla_decode_wgmma_supports(heads, latent, rope))
    return "wgmma";
  return "mma_sync";
}

void dense(int64_t batch, int64_t heads, int64_t context, cuda::MlaDecodeKernel kernel) {
  const int64_t latent = 512, rope = 64, d = latent + rope, page = cuda::kMlaBlockSize;
  const int64_t blocks_per_seq = (context + page - 1) / page;
  DeviceArray<Bf16> q(batch * heads * d), cache(batch * blocks_per_seq * page * d), out(batch * heads * latent);
  cuda::fill_dummy_bf16(q.data(), q.size(), 1, 1.0f, 0.0f, cudaStreamPerThread);
  cuda::fill_dummy_bf16(cache.data(), cache.size(), 2, 1.0f, 0.0f, cudaStreamPerThread);
  std::vector<int32_t> table(batch * blocks_per_seq), lens(batch, static_cast<int32_t>(context));
  std::iota(table.begin(), table.end(), 0);
  auto d_table = DeviceArray<int32_t>::from_host(table), d_lens = DeviceArray<int32_t>::from_host(lens);
  const int64_t splits = cuda::mla_decode_splits(batch, heads, latent, rope, context, num_sms(), kernel);
  DeviceArray<uint8_t> workspace(cuda::mla_decode_workspace_bytes(batch, heads, latent, splits));
  const float ms = median_ms(30, [&] {
    cuda::mla_decode_attention(q.data(), cache.data(), d_table.data(), blocks_per_seq, d_lens.data(), batch, heads,
                               latent, rope, 1.0f / std::sqrt(static_cast<float>(d)), splits,
                               reinterpret_cast<float*>(workspace.data()), out.data(), cudaStreamPerThread, 0,
                               kernel);
  });
  const double flops = 2.0 * batch * heads * context * (d + latent);
  const double bytes = static_cast<double>(batch) * context * d * 2 + static_cast<double>(batch) * heads * (d + latent) * 2;
  std::printf("{\"impl\": \"deepinfer\", \"kind\": \"dense\", \"kernel\": \"%s\", \"heads\": %ld, \"batch\": %ld, "
              "\"context\": %ld, \"splits\": %ld, \"us\": %.2f, \"bytes\": %.0f, \"tb_s\": %.3f, \"tflop_s\": %.1f}\n",
              kernel_name(kernel, heads, latent, rope), heads, batch,
              context, splits, ms * 1e3, bytes, bytes / (ms * 1e-3) / 1e12, flops / (ms * 1e-3) / 1e12);
}

// V3's prefill attention (cuda::mla_prefill_attention, the expanded form: q.k 128 + 64, v 128, 128 heads), one
// sequence of `tokens` from scratch, causal; every kernel.
void prefill(int64_t tokens, cuda::MlaPrefillKernel kernel) {
  const int64_t heads = 128, nope = 128, rope = 64, v = 128, qk = nope + rope;
  DeviceArray<Bf16> q(tokens * heads * qk), kv(tokens * heads * (nope + v)), pe(tokens * rope), out(tokens * heads * v);
  cuda::fill_dummy_bf16(q.data(), q.size(), 3, 1.0f, 0.0f, cudaStreamPerThread);
  cuda::fill_dummy_bf16(kv.data(), kv.size(), 4, 1.0f, 0.0f, cudaStreamPerThread);
  cuda::fill_dummy_bf16(pe.data(), pe.size(), 5, 1.0f, 0.0f, cudaStreamPerThread);
  std::vector<int32_t> seq(tokens, 0), pos(tokens), cu = {0, static_cast<int32_t>(tokens)};
  std::iota(pos.begin(), pos.end(), 0);
  const std::vector<int32_t> tiles = cuda::mla_prefill_tiles(seq, nope, rope, v, kernel);
  auto d_seq = DeviceArray<int32_t>::from_host(seq), d_pos = DeviceArray<int32_t>::from_host(pos);
  auto d_cu = DeviceArray<int32_t>::from_host(cu), d_tiles = DeviceArray<int32_t>::from_host(tiles);
  const float ms = median_ms(10, [&] {
    if (!cuda::mla_prefill_attention(q.data(), kv.data(), pe.data(), rope, d_seq.data(), d_pos.data(), d_cu.data(),
                                     d_tiles.data(), static_cast<int64_t>(tiles.size()) - 1, heads, nope, rope, v,
                                     1.0f / std::sqrt(static_cast<float>(qk)), out.data(), cudaStreamPerThread, kernel,
                                     tokens, tokens))
      throw std::runtime_error("mla_prefill_attention launched nothing");
  });
  const char* name = kernel == cuda::MlaPrefillKernel::kTma && cuda::mla_prefill_tma_supports(nope, rope, v) ? "tma"
                     : kernel != cuda::MlaPrefillKernel::kMmaSync && cuda::mla_prefill_wgmma_supports(nope, rope, v)
                         ? "wgmma"
                         : "mma_sync";
  const double flops = 2.0 * heads * (qk + v) * (static_cast<double>(tokens) * (tokens + 1) / 2);
  std::printf("{\"impl\": \"deepinfer\", \"kind\": \"prefill\", \"kernel\": \"%s\", \"heads\": %ld, \"tokens\": %ld, "
              "\"us\": %.2f, \"tflop_s\": %.1f}\n",
              name, heads, tokens, ms * 1e3, flops / (ms * 1e-3) / 1e12);
}

void sparse(int64_t batch, int64_t picks, int64_t window, int64_t context) {
  const int64_t heads = 64, hd = 512, page = 64, blocks_per_seq = (context + page - 1) / page;
  DeviceArray<Bf16> q(batch * heads * hd), extra(batch * picks * hd), out(batch * heads * hd);
  DeviceArray<uint8_t> codes(batch * blocks_per_seq * page * hd), scales(batch * blocks_per_seq * page * hd / 32);
  cuda::fill_dummy_bf16(q.data(), q.size(), 3, 1.0f, 0.0f, cudaStreamPerThread);
  cuda::fill_dummy_bf16(extra.data(), extra.size(), 4, 1.0f, 0.0f, cudaStreamPerThread);
  std::vector<uint8_t> host_codes(codes.size()), host_scales(scales.size(), 127);  // ue8m0 127: 2^0
  std::mt19937 rng(5);
  for (uint8_t& c : host_codes) c = static_cast<uint8_t>(0x20 + rng() % 16);
  codes.copy_from(host_codes);
  scales.copy_from(host_scales);
  std::vector<int32_t> table(batch * blocks_per_seq), positions(batch, static_cast<int32_t>(context - 1));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> offsets(batch + 1), ids(batch * picks);
  for (int64_t b = 0; b <= batch; ++b) offsets[b] = static_cast<int32_t>(b * picks);
  for (int64_t i = 0; i < batch * picks; ++i) ids[i] = static_cast<int32_t>(i);  // the gathered picks, in order
  auto d_table = DeviceArray<int32_t>::from_host(table), d_pos = DeviceArray<int32_t>::from_host(positions);
  auto d_offsets = DeviceArray<int32_t>::from_host(offsets), d_ids = DeviceArray<int32_t>::from_host(ids);
  auto sinks = DeviceArray<float>::from_host(std::vector<float>(heads, 0.5f));
  cuda::SparseWindowKeys keys{codes.data(), scales.data(), d_table.data(), blocks_per_seq, d_pos.data(), window,
                              extra.data(), d_offsets.data(), d_ids.data()};
  const float ms = median_ms(30, [&] {
    cuda::sparse_window_attention(q.data(), keys, sinks.data(), batch, heads, hd, 1.0f / std::sqrt(512.0f), out.data(),
                                  cudaStreamPerThread);
  });
  const double bytes = static_cast<double>(batch) * (window * (hd + hd / 32) + picks * hd * 2) +
                       static_cast<double>(batch) * heads * hd * 2 * 2;
  std::printf("{\"impl\": \"deepinfer\", \"kind\": \"sparse\", \"heads\": %ld, \"batch\": %ld, \"topk\": %ld, "
              "\"window\": %ld, \"us\": %.2f, \"bytes\": %.0f, \"tb_s\": %.3f}\n", heads, batch, picks, window, ms * 1e3,
              bytes, bytes / (ms * 1e-3) / 1e12);
}

constexpr cuda::MlaPrefillKernel kPrefillKernels[] = {cuda::MlaPrefillKernel::kWgmma, cuda::MlaPrefillKernel::kTma,
                                                      cuda::MlaPrefillKernel::kMmaSync};
constexpr cuda::MlaDecodeKernel kDecodeKernels[] = {cuda::MlaDecodeKernel::kWgmma, cuda::MlaDecodeKernel::kSeesaw,
                                                    cuda::MlaDecodeKernel::kMmaSync};

int run(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--dense") {  // one point (for a profiler): --dense HEADS BATCH CONTEXT
    const int64_t heads = std::atol(argv[2]), batch = std::atol(argv[3]), context = std::atol(argv[4]);
    for (auto kernel : kDecodeKernels) dense(batch, heads, context, kernel);
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--prefill") {  // one prefill point, both kernels: --prefill TOKENS
    for (auto kernel : kPrefillKernels) prefill(std::atol(argv[2]), kernel);
    return 0;
  }
  for (int64_t heads : {16, 128})
    for (int64_t context : {1024, 4096, 32768})
      for (int64_t batch : {1, 8, 64, 128, 256}) {
        if (static_cast<double>(batch) * context > 4096.0 * 256) continue;  // at most 1.2 GB of cache
        if (heads == 16) dense(batch, heads, context, cuda::MlaDecodeKernel::kMmaSync);  // the only one at 16
        else
          for (auto kernel : kDecodeKernels) dense(batch, heads, context, kernel);
      }
  for (int64_t batch : {1, 8, 64, 128, 256}) sparse(batch, 512, 128, 4096);
  for (int64_t tokens : {1024, 4096, 16384})
    for (auto kernel : kPrefillKernels) prefill(tokens, kernel);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("attention_bench", run, argc, argv); }
