// The device dispatch/combine (NcclExpertDispatch) against the host arithmetic it must reproduce, with
// experts that scale their input (expert e: y = (1 + e) x), so every row's destination, ids and weights show
// in the result: out[t] = base[t] + sum_k w[t, k] (1 + e_k) x[t]. Random routing, redundant replicas, ranks
// with no tokens. Needs a GPU per rank (NCCL); skipped otherwise (CI).
#ifdef DEEPINFER_HAVE_CUDA
#include <cuda_bf16.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "src/moe/expert_placement.h"
#include "src/moe/nccl_expert_dispatch.h"
#include "tests/mp/mpi_test_util.h"

namespace deepinfer {
namespace {

template <class T>
DeviceArray<T> upload(const std::vector<T>& host) {
  return DeviceArray<T>::from_host(host);
}

// pairs: --batch-invariant's pair outputs, where the block returns each entry's own (unweighted) output and the
// result must be moe_unpermute's k-ordered sum bit for bit: acc = base, then acc = fma(w_k, y_k, acc), rounded once.
void check_against_host(int gpu, bool pairs) {
  DI_CUDA_CHECK(cudaSetDevice(gpu));
  NcclCommunicator comm(MPI_COMM_WORLD, 120.0);
  const int R = comm.size(), me = comm.rank();
  const int64_t L = 2, E = 16, H = 64, K = 4;
  // Redundant slots: 16 experts in 16 + 2R slots, so some experts have replicas on several ranks.
  const ExpertPlacement placement = ExpertPlacement::make_default(L, E, R, E + 2 * R);
  NcclExpertDispatch dispatch(comm, E, H, K);
  dispatch.set_placement(placement.phy2log(), placement.slots_per_rank());
  dispatch.set_pair_outputs(pairs);

  std::mt19937 rng(1234 + me);
  std::vector<int64_t> routed(L * E, 0);
  for (int64_t layer = 0; layer < L; ++layer) {
    const int64_t T = me == R - 1 && R > 1 ? 0 : 37 + 11 * me;  // the last rank sends nothing
    std::vector<__nv_bfloat16> x(T * H), base(T * H);
    std::vector<int32_t> ids(T * K);
    std::vector<float> weights(T * K);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> experts(E);
      for (int64_t e = 0; e < E; ++e) experts[e] = static_cast<int32_t>(e);
      std::shuffle(experts.begin(), experts.end(), rng);
      for (int64_t k = 0; k < K; ++k) {
        ids[t * K + k] = experts[k];
        weights[t * K + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
        ++routed[layer * E + experts[k]];
      }
      for (int64_t i = 0; i < H; ++i) {
        x[t * H + i] = __float2bfloat16(std::normal_distribution<float>()(rng));
        base[t * H + i] = __float2bfloat16(std::normal_distribution<float>()(rng));
      }
    }
    auto x_dev = upload(x), out_dev = upload(base);
    auto ids_dev = upload(ids);
    auto weights_dev = upload(weights);
    const DeviceDispatch got = dispatch.dispatch(layer, x_dev.data(), ids_dev.data(), weights_dev.data(), T);
    // The local experts, on the host: every entry received here must be one this rank holds.
    std::vector<__nv_bfloat16> rx(got.rows * H), y(got.rows * (pairs ? K : 1) * H);
    std::vector<int32_t> rids(got.rows * K);
    std::vector<float> rweights(got.rows * K);
    DI_CUDA_CHECK(cudaMemcpy(rx.data(), got.x, rx.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    DI_CUDA_CHECK(cudaMemcpy(rids.data(), got.ids, rids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    DI_CUDA_CHECK(cudaMemcpy(rweights.data(), got.weights, rweights.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < got.rows; ++i) {
      float scale = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = rids[i * K + k];
        if (e == E) continue;
        EXPECT_TRUE(placement.rank_holds(me, layer, e)) << "rank " << me << " got expert " << e;
        scale += rweights[i * K + k] * static_cast<float>(1 + e);
        for (int64_t j = 0; pairs && j < H; ++j)
          y[(i * K + k) * H + j] = __float2bfloat16(static_cast<float>(1 + e) * __bfloat162float(rx[i * H + j]));
      }
      for (int64_t j = 0; !pairs && j < H; ++j) y[i * H + j] = __float2bfloat16(scale * __bfloat162float(rx[i * H + j]));
    }
    if (got.rows > 0)
      DI_CUDA_CHECK(cudaMemcpy(got.y, y.data(), y.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    dispatch.combine(out_dev.data());
    const std::vector<__nv_bfloat16> out = out_dev.to_host();
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t) {
      float scale = 0.0f;
      for (int64_t k = 0; k < K; ++k) scale += weights[t * K + k] * static_cast<float>(1 + ids[t * K + k]);
      for (int64_t i = 0; i < H; ++i) {
        if (pairs) {
          float acc = __bfloat162float(base[t * H + i]);
          for (int64_t k = 0; k < K; ++k)
            acc = std::fma(weights[t * K + k],
                           __bfloat162float(__float2bfloat16(static_cast<float>(1 + ids[t * K + k]) *
                                                             __bfloat162float(x[t * H + i]))), acc);
          const uint16_t want = std::bit_cast<uint16_t>(__float2bfloat16(acc));
          if (want != std::bit_cast<uint16_t>(out[t * H + i]) && ++bad <= 5)
            ADD_FAILURE() << "rank " << me << " layer " << layer << " token " << t << " [" << i << "]: "
                          << __bfloat162float(out[t * H + i]) << " vs " << acc << " (pair outputs: bit for bit)";
          continue;
        }
        const float b = __bfloat162float(base[t * H + i]), routed_part = scale * __bfloat162float(x[t * H + i]);
        const float want = b + routed_part, have = __bfloat162float(out[t * H + i]);
        // Each destination's partial sum is rounded to bf16 (2^-9 relative), then the result (2^-9 again).
        const float tolerance = 8e-3f * (std::abs(want) + std::abs(routed_part) + std::abs(b)) + 1e-6f;
        if (std::abs(have - want) > tolerance && ++bad <= 5)
          ADD_FAILURE() << "rank " << me << " layer " << layer << " token " << t << " [" << i << "]: " << have
                        << " vs " << want;
      }
    }
  }
  std::vector<int64_t> drained(L * E, 0);
  dispatch.drain_routed_counts(drained);
  EXPECT_EQ(drained, routed);
  comm.finalize();
}

TEST(NcclExpertDispatch, MatchesHostArithmeticWithReplicas) {
  const int gpu = testing::own_gpu_or_none();
  if (gpu < 0) GTEST_SKIP() << "needs one GPU per rank";
  check_against_host(gpu, false);
}

TEST(NcclExpertDispatch, PairOutputsSumInTokenOrderBitForBit) {
  const int gpu = testing::own_gpu_or_none();
  if (gpu < 0) GTEST_SKIP() << "needs one GPU per rank";
  check_against_host(gpu, true);
}

}  // namespace
}  // namespace deepinfer
#endif
