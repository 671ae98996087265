#include "src/bench/dispatch_bench.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>
#include <random>

#include "src/comm/nccl_communicator.h"
#include "src/moe/expert_placement.h"
#include "src/moe/nccl_expert_dispatch.h"

namespace deepinfer {

namespace {

using Clock = std::chrono::steady_clock;

// Median over iterations of the slowest rank's time for `op` (the ranks start together).
double median_us(const World& world, int64_t warmup, int64_t iters, const std::function<void()>& op) {
  std::vector<double> times;
  for (int64_t i = 0; i < warmup + iters; ++i) {
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    world.barrier("dispatch bench: start together");
    const auto start = Clock::now();
    op();
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const double us = world.max_over_ranks(std::chrono::duration<double, std::micro>(Clock::now() - start).count(),
                                           "dispatch bench: slowest rank");
    if (i >= warmup) times.push_back(us);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace

int64_t experts_for_top_k(int64_t top_k) { return top_k == 6 ? 64 : 256; }

std::vector<DispatchBenchRow> run_dispatch_bench(const World& world, int gpu, const DispatchBenchOptions& o) {
  DI_CUDA_CHECK(cudaSetDevice(gpu));
  NcclCommunicator comm(world.comm());
  const int R = comm.size(), me = comm.rank();
  std::vector<DispatchBenchRow> rows;
  for (int64_t top_k : o.top_ks) {
    for (int64_t hidden : o.hiddens) {
      for (int64_t tokens : o.tokens) {
        const int64_t E = experts_for_top_k(top_k), K = top_k, H = hidden, T = tokens;
        const ExpertPlacement placement = ExpertPlacement::make_default(1, E, R);
        NcclExpertDispatch dispatch(comm, E, H, K);
        dispatch.set_placement(placement.phy2log(), placement.slots_per_rank());
        // Random routing: K distinct experts per token, uniform; random rows and weights.
        std::mt19937 rng(static_cast<uint32_t>(7 + me));
        std::vector<int32_t> ids(T * K), experts(E);
        std::iota(experts.begin(), experts.end(), 0);
        for (int64_t t = 0; t < T; ++t) {
          std::shuffle(experts.begin(), experts.end(), rng);
          std::copy_n(experts.begin(), K, ids.begin() + t * K);
        }
        std::vector<float> weights(T * K, 1.0f / static_cast<float>(K));
        std::vector<__nv_bfloat16> x(T * H);
        for (auto& v : x) v = __float2bfloat16(std::normal_distribution<float>()(rng));
        auto x_dev = DeviceArray<__nv_bfloat16>::from_host(x);
        auto out_dev = DeviceArray<__nv_bfloat16>(T * H);
        auto ids_dev = DeviceArray<int32_t>::from_host(ids);
        auto weights_dev = DeviceArray<float>::from_host(weights);

        DeviceDispatch received{};
        const double dispatch_us = median_us(world, o.warmup, o.iters, [&] {
          received = dispatch.dispatch_on(0, x_dev.data(), ids_dev.data(), weights_dev.data(), T, nullptr);
        });
        DI_CUDA_CHECK(cudaMemset(received.y, 0, std::max<int64_t>(received.rows, 1) * H * sizeof(__nv_bfloat16)));
        const double combine_us = median_us(world, o.warmup, o.iters, [&] { dispatch.combine_on(out_dev.data(), nullptr); });

        // The bytes each rank sent, averaged over ranks, for the plain all-to-all of the same volume.
        int64_t records = 0;
        for (int32_t c : dispatch.sent()) records += c;
        double sent[2] = {static_cast<double>(records * dispatch.record_bytes()), static_cast<double>(records * H * 2)};
        world.sum_over_ranks(sent, 2, "dispatch bench: bytes sent");
        sent[0] /= R, sent[1] /= R;
        auto plain_us = [&](double bytes) {
          const auto per_peer = static_cast<size_t>(bytes / R);
          DeviceArray<uint8_t> send(std::max<size_t>(per_peer * R, 1)), recv(std::max<size_t>(per_peer * R, 1));
          return median_us(world, o.warmup, o.iters,
                           [&] { comm.all_to_all(send.data(), recv.data(), per_peer, DType::kU8, "plain all-to-all"); });
        };
        const double plain_dispatch_us = plain_us(sent[0]), plain_combine_us = plain_us(sent[1]);
        auto row = [&](const char* op, double bytes, double us) {
          DispatchBenchRow r{R, T, H, K, E, op, bytes, us};
          r.algbw_gbs = bytes / (us * 1e3);
          r.busbw_gbs = r.algbw_gbs * (R - 1) / R;
          rows.push_back(r);
        };
        row("dispatch", sent[0], dispatch_us);
        row("ncclAlltoAll", sent[0], plain_dispatch_us);
        row("combine", sent[1], combine_us);
        row("ncclAlltoAll", sent[1], plain_combine_us);
      }
    }
  }
  comm.finalize();
  return rows;
}

}  // namespace deepinfer
