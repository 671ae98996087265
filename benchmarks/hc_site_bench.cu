// DeepSeek-V4.1-Flash's hyper-connection sites (hc 4, hidden 5120, 20 Sinkhorn rounds) alone, at decode and prefill
// token counts: the chain the model ran (the previous sublayer's hc_post, hc_flat_rms_norm, the mixes' projection by
// device_linear, hc_mixes, hc_collapse_rms_norm: five launches) against hc_site (one launch, hc_post included).
//
//   hc_site_bench [--reps 20]
//
// A round runs 80 sites (the 40 layers' two) with 80 different fn weights (79 MB, more than L2), on one set of
// streams, as a step does. Prints per site the median over --reps rounds of the round's time / 80, the bytes a site
// must move (fn, the streams read and written back, the sublayer output read, h written) and its floor at
// 4.25 TB/s, and the largest difference between the two paths' h relative to the largest |h|.
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
#include "kernels/cuda/hyper_connections.cuh"
#include "src/core/check.h"
#include "src/model/cuda/cuda_mlp.h"
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
  const cudaStream_t stream = cudaStreamPerThread;
  constexpr int64_t hc = 4, H = 5120, D = hc * H, M = (2 + hc) * hc, kSites = 80, kIters = 20;
  constexpr float eps = 1e-20f, hc_eps = 1e-6f;
  constexpr double kCopyBytesPerSecond = 4.25e12;
  DeviceArray<__nv_bfloat16> fn(kSites * M * D), norm(H);
  DeviceArray<float> base(M), scale(3);
  cuda::fill_dummy_bf16(fn.data(), kSites * M * D, 3, 0.01f, 0.0f, stream);
  cuda::fill_dummy_bf16(norm.data(), H, 5, 0.1f, 1.0f, stream);
  cuda::fill_dummy_f32(base.data(), M, 7, 0.5f, 0.0f, stream);
  cuda::fill_dummy_f32(scale.data(), 3, 9, 0.1f, 1.0f, stream);
  std::printf("%6s %-28s %10s %9s %9s %9s %12s\n", "tokens", "path", "us/site", "MB/site", "floor us", "floor/us",
              "max rel diff");
  for (int64_t T : {1, 8, 64, 256, 1024, 4096}) {
    DeviceArray<float> streams0(T * D), streams(T * D), pre(T * hc), next_pre(T * hc), post(T * hc), comb(T * hc * hc),
        post0(T * hc), comb0(T * hc * hc), mixes(T * M);
    DeviceArray<__nv_bfloat16> out(T * H), flat(T * D), h_chain(T * H), h_site(T * H);
    cuda::fill_dummy_f32(streams0.data(), T * D, 11, 1.0f, 0.0f, stream);
    cuda::fill_dummy_f32(pre.data(), T * hc, 13, 0.2f, 0.5f, stream);
    cuda::fill_dummy_f32(post0.data(), T * hc, 17, 0.2f, 1.0f, stream);
    cuda::fill_dummy_f32(comb0.data(), T * hc * hc, 19, 0.05f, 0.25f, stream);
    cuda::fill_dummy_bf16(out.data(), T * H, 23, 1.0f, 0.0f, stream);
    const auto reset = [&] {
      DI_CUDA_CHECK(cudaMemcpyAsync(streams.data(), streams0.data(), T * D * 4, cudaMemcpyDeviceToDevice, stream));
      DI_CUDA_CHECK(cudaMemcpyAsync(post.data(), post0.data(), T * hc * 4, cudaMemcpyDeviceToDevice, stream));
      DI_CUDA_CHECK(cudaMemcpyAsync(comb.data(), comb0.data(), T * hc * hc * 4, cudaMemcpyDeviceToDevice, stream));
    };
    // Every site's pre is the same buffer (the collapse weights do not move the figures); the outputs of the last
    // site of a round are compared.
    const auto chain_site = [&](int64_t s) {
      cuda::hc_post(streams.data(), out.data(), post.data(), comb.data(), T, hc, H, stream);
      cuda::hc_flat_rms_norm(streams.data(), T, D, eps, flat.data(), stream);
      deepinfer::device_linear({stream, blas.get(), false}, flat.data(), fn.data() + s * M * D, mixes.data(), true, T,
                               M, D, sms);
      cuda::hc_mixes(mixes.data(), base.data(), scale.data(), T, hc, hc_eps, kIters, next_pre.data(), post.data(),
                     comb.data(), stream);
      cuda::hc_collapse_rms_norm(streams.data(), pre.data(), norm.data(), T, hc, H, eps, h_chain.data(), stream);
    };
    const auto fused_site = [&](int64_t s) {
      const cuda::HcSiteWeights w{fn.data() + s * M * D, base.data(), scale.data(), norm.data()};
      cuda::hc_site(streams.data(), out.data(), pre.data(), w, T, hc, H, eps, hc_eps, kIters, next_pre.data(),
                    post.data(), comb.data(), h_site.data(), stream);
    };
    const float chain_ms = median_ms(reps, [&] {
      for (int64_t s = 0; s < kSites; ++s) chain_site(s);
    });
    const float site_ms = median_ms(reps, [&] {
      for (int64_t s = 0; s < kSites; ++s) fused_site(s);
    });
    // One site from the same inputs on both paths, for the difference.
    reset();
    chain_site(0);
    reset();
    fused_site(0);
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> a = to_host_float(h_chain.data(), T * H), b = to_host_float(h_site.data(), T * H);
    const double rel_diff = max_relative_difference(b, a);
    const double bytes = static_cast<double>(M * D * 2) + 2.0 * T * D * 4 + 2.0 * T * H * 2;
    const double floor_us = bytes / kCopyBytesPerSecond * 1e6;
    const double chain_us = chain_ms * 1e3 / kSites, site_us = site_ms * 1e3 / kSites;
    std::printf("%6ld %-28s %10.2f %9.3f %9.2f %9.3f\n", static_cast<long>(T), "chain (hc_post + 4 kernels)", chain_us,
                bytes / 1e6, floor_us, floor_us / chain_us);
    std::printf("%6ld %-28s %10.2f %9.3f %9.2f %9.3f %12.2e\n", static_cast<long>(T), "hc_site (one launch)", site_us,
                bytes / 1e6, floor_us, floor_us / site_us, rel_diff);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("hc_site_bench", run, argc, argv); }
