#include "src/model/cuda/cuda_moe.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/moe_gemv.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/cuda/moe_fp4_gemm.cuh"
#include "kernels/cuda/moe_fp8.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/moe_permute.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "src/model/router_params.h"

namespace deepinfer {

namespace {

using Bf16 = __nv_bfloat16;

// A pair-count threshold, or the environment variable `name` where set (a measurement's override).
int64_t pairs_threshold(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(env, &end, 10);
  DI_INPUT_CHECK(*end == '\0' && value >= 0, "{}='{}' is not a count of pairs", name, env);
  return value;
}

// FP4 experts at decode, by pairs a step over the store's places (benchmarks/moe_fp4_gemv_bench and V4.1-Flash decode
// at 4 layers, context 4096; results/h200/speculation/README.md, the runs of 2026-12-03):
//  - below a quarter a place, the per-pair matrix-vector kernels (no sort to wait for);
//  - from there to 2.5 a place (CudaMoe::kFp4GroupedMaxPairsPerPlaceTimes2), the grouped form on the CUDA cores:
//    each expert streamed once for its pairs, the per-pair kernels' bits. Kernels alone, 384 experts, per layer: 96
//    pairs 1.24 / 1.19 ms (per pair / grouped), 384 pairs 4.74 / 3.44, 768 pairs 9.38 / 5.44; whole steps against
//    the earlier rule (per pair, tiles from 480 pairs): batch 32 13.50 -> 11.50 ms, 64 24.38 -> 18.28, 96 30.43 ->
//    24.44, 128 34.56 -> 30.06. Its products cost more than the bytes from ~2 pairs a place;
//  - but from max(96, a quarter a place) pairs (kFp4MmaMinPairs) to 8 a place (kFp4MmaMaxPairsPerPlace) the grouped
//    form on the tensor cores (8 pairs an MMA; its own bits) wherever it runs: 1,152 pairs 4.48 ms against the tile
//    kernel's 9.17, 3,072 pairs 7.42 / 9.55; whole steps (speculation/2026-12-03-ce9ee46) batch 192 41.07 -> 27.98 ms, 256 46.29 ->
//    34.48, 384 54.83 -> 46.03, and in the CUDA-core form's range (speculation/2026-12-03-92519c8 and -f220bbb) batch 16 7.68 -> 7.08, 32 11.62 ->
//    10.03, 48 15.02 -> 12.47 ms, 64 18.37 -> 14.72, 96 24.39 -> 18.46, 128 30.27 -> 22.02, 160 36.25 -> 25.21. With
//    128 experts it stops paying near 8 (1,440 pairs 3.34 ms against the tiles' 3.20). The floor keeps the test
//    fixtures' steps (8 experts, at most 64 pairs for this form) off it: their decode and verify rows must take
//    bit-compatible paths;
//  - above, the tiles (which wait for the experts' row counts on the host, so such steps run eagerly); below 256 pairs
//    without expert parallelism the per-pair kernels take what the grouped form does not (a few experts of many
//    pairs: the test fixtures), as before.
// DEEPINFER_FP4_GROUPED_FROM_PAIRS, DEEPINFER_FP4_TILES_FROM_PAIRS, DEEPINFER_FP4_MMA_FROM_PAIRS and
// DEEPINFER_FP4_MMA_UP_TO_PAIRS (0: the tensor-core form never) override the thresholds (a measurement's overrides).
int64_t fp4_grouped_from_pairs(int64_t places) {
  return pairs_threshold("DEEPINFER_FP4_GROUPED_FROM_PAIRS", std::max<int64_t>(1, places / 4));
}
int64_t fp4_tiles_from_pairs(int64_t places) {
  return pairs_threshold("DEEPINFER_FP4_TILES_FROM_PAIRS",
                         std::max<int64_t>(256, places * CudaMoe::kFp4GroupedMaxPairsPerPlaceTimes2 / 2 + 1));
}
int64_t fp4_mma_from_pairs(int64_t places) {
  return pairs_threshold("DEEPINFER_FP4_MMA_FROM_PAIRS", std::max<int64_t>(CudaMoe::kFp4MmaMinPairs, places / 4));
}
int64_t fp4_mma_up_to_pairs(int64_t places) {
  return pairs_threshold("DEEPINFER_FP4_MMA_UP_TO_PAIRS", places * CudaMoe::kFp4MmaMaxPairsPerPlace);
}

// FP8 experts (DeepSeek-V3's) at decode: the grouped form (moe_grouped_gemv_fp8, each expert streamed once for its
// pairs) from this many pairs a step; DEEPINFER_FP8_GROUPED_FROM_PAIRS sets it. Off by default (never): from 1 pair
// on, V3's decode rank of 32P+144D took 50.4 / 140.2 / 260.9 ms at 8 / 32 / 64 requests against the per-pair
// kernels' 30.0 / 39.3 / 49.0 (an H100, results/h200/v3/README.md).
int64_t fp8_grouped_from_pairs() {
  return pairs_threshold("DEEPINFER_FP8_GROUPED_FROM_PAIRS", std::numeric_limits<int64_t>::max());
}

// A layer's routed rows on the host, for the exchange over host memory: h as fp32, the top-k ids and weights.
struct HostRows {
  std::vector<float> h, weights;
  std::vector<int32_t> ids;
};

HostRows rows_to_host(const Bf16* h, const int32_t* ids, const float* weights, int64_t rows, int64_t H, int64_t K,
                      ScratchPool& scratch) {
  HostRows host{std::vector<float>(rows * H), std::vector<float>(rows * K), std::vector<int32_t>(rows * K)};
  auto* h32 = scratch.alloc<float>(rows * H);
  cuda::bf16_to_f32(h, h32, rows * H, nullptr);
  DI_CUDA_CHECK(cudaMemcpy(host.h.data(), h32, rows * H * sizeof(float), cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(host.ids.data(), ids, rows * K * sizeof(int32_t), cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(host.weights.data(), weights, rows * K * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

// The model's stream waits for `event` (if any) before what it runs next.
void wait_for(cudaEvent_t event) {
  if (event != nullptr) DI_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamPerThread, event));
}

}  // namespace

CudaMoe::CudaMoe(const ModelConfig& config, CudaExpertStore& experts, int num_sms, StepProfiler& profiler)
    : config_(config),
      fp4_tiles_from_pairs_(fp4_tiles_from_pairs(experts.capacity())),
      fp4_grouped_from_pairs_(fp4_grouped_from_pairs(experts.capacity())),
      fp4_mma_from_pairs_(fp4_mma_from_pairs(experts.capacity())),
      fp4_mma_up_to_pairs_(fp4_mma_up_to_pairs(experts.capacity())),
      fp8_grouped_from_pairs_(fp8_grouped_from_pairs()),
      experts_(experts),
      num_sms_(num_sms),
      profiler_(profiler),
      swiglu_limit_(static_cast<float>(config.swiglu_limit)),
      expert_sync_(DeviceArray<int32_t>::from_host(
          std::vector<int32_t>(cuda::moe_grouped_sync_ints(config.n_routed_experts), 0))) {}

bool CudaMoe::fp8_grouped(int64_t pairs) const {
  return experts_.format() == CudaExpertStore::Format::kFp8 && pairs >= fp8_grouped_from_pairs_ &&
         pairs < kGroupedMaxPairs && !config_.batch_invariant &&
         cuda::moe_grouped_gemv_fp8_supports(config_.hidden_size, config_.moe_intermediate_size, experts_.fp8_block());
}

bool CudaMoe::fp4_mma(int64_t pairs) const {
  return pairs >= fp4_mma_from_pairs_ && pairs <= fp4_mma_up_to_pairs_ && pairs < kGroupedMaxPairs &&
         cuda::moe_grouped_mma_fp4_supports(config_.hidden_size, config_.moe_intermediate_size);
}

CudaMoe::Fp4Form CudaMoe::fp4_form(int64_t pairs, int64_t num_ids) const {
  const int64_t places = experts_.capacity();
  if (!experts_stay_on_device(pairs)) return Fp4Form::kTiles;
  if (fp4_mma(pairs)) return Fp4Form::kGroupedMma;
  if (pairs >= fp4_grouped_from_pairs_ && 2 * pairs <= kFp4GroupedMaxPairsPerPlaceTimes2 * places &&
      cuda::moe_grouped_gemv_fp4_supports(config_.hidden_size, config_.moe_intermediate_size))
    return Fp4Form::kGrouped;
  // Under expert parallelism a rank's few places receive many pairs each: the matrix-vector kernels would stream
  // an expert once per pair, the tiles once per 64 rows.
  if (num_ids == places || pairs <= kFp4GemvMaxPairsPerPlace * places) return Fp4Form::kPerPair;
  return Fp4Form::kTiles;
}

bool CudaMoe::experts_stay_on_device(int64_t pairs) const {
  // The tile path (FP4 from fp4_tiles_from_pairs_ pairs; every pair count under --batch-invariant, whose one path
  // it is) reads the experts' row counts back to the host.
  if (config_.batch_invariant) return false;
  if (experts_.format() == CudaExpertStore::Format::kFp4 && pairs >= fp4_tiles_from_pairs_ && !fp4_mma(pairs))
    return false;
  if (experts_.format() == CudaExpertStore::Format::kFp8 && !fp8_grouped(pairs) &&
      (pairs > std::max(kGemvMaxPairs, kFp8GemvMaxPairsPerPlace * experts_.capacity()) ||
       !cuda::moe_gemv_fp8_supports(config_.hidden_size, config_.moe_intermediate_size, config_.num_experts_per_tok,
                                    experts_.fp8_block())))
    return false;
  // Both device paths (moe_gemv, moe_grouped) read rows in 16-byte pieces; moe_route sorts within its limits
  // (one more expert id with expert parallelism).
  static_assert(kGroupedMaxPairs <= cuda::kMoeRouteMaxRows);
  return pairs < kGroupedMaxPairs && config_.n_routed_experts < cuda::kMoeRouteMaxExperts &&
         config_.hidden_size % 8 == 0 && config_.moe_intermediate_size % 8 == 0;
}

bool CudaMoe::run(int64_t moe_layer, const CudaMoeWeights& w, const Bf16* h, Bf16* out, int64_t rows,
                  ExpertDispatcher* dispatcher, ScratchPool& scratch, const ResidualNorm* then) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
  auto* logits = scratch.alloc<float>(rows * E);
  auto* ids = scratch.alloc<int32_t>(rows * K);
  auto* weights = scratch.alloc<float>(rows * K);
  profiler_.mark("moe:before");
  // Without expert parallelism the shared expert (it needs only h) writes `out` on the side stream while the
  // router and the routed experts run here; the routed sum is added onto it once both are done (faster than on
  // this stream before or after the router: results/h200/design-measurements.md).
  const bool shared_beside = w.has_shared && dispatcher == nullptr;
  if (shared_beside) {
    DI_CUDA_CHECK(cudaEventRecord(shared_start_.get(), cudaStreamPerThread));
    DI_CUDA_CHECK(cudaStreamWaitEvent(side_stream_.get(), shared_start_.get()));
    device_mlp(side_lane(), w.shared, h, out, rows, H, scratch, num_sms_, swiglu_limit_);
    DI_CUDA_CHECK(cudaEventRecord(shared_done_.get(), side_stream_.get()));
  }
  device_linear(main_lane(), h, w.router, logits, true, rows, E, H, num_sms_);
  const cpu::RouterParams params = router_params(c, w.router_bias);
  cuda::route_topk(logits, rows, params, ids, weights, nullptr);
  profiler_.mark("moe:router");

  if (shared_beside) {
    const bool done_then = routed_experts(moe_layer, h, ids, weights, rows, E, out, scratch, shared_done_.get(), then);
    DI_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamPerThread, shared_done_.get()));  // joined even if nothing waited
    profiler_.mark("moe:routed experts + shared beside");
    return done_then;
  }
  if (w.has_shared) device_mlp(main_lane(), w.shared, h, out, rows, H, scratch, num_sms_, swiglu_limit_);
  else DI_CUDA_CHECK(cudaMemsetAsync(out, 0, rows * H * sizeof(Bf16)));
  profiler_.mark("moe:shared");

  if (dispatcher != nullptr && dispatcher->device() != nullptr) {
    // Expert parallelism GPU to GPU: the received rows run through routed_experts between dispatch and combine.
    DeviceExpertDispatcher& ep = *dispatcher->device();
    const DeviceDispatch mine = ep.dispatch(moe_layer, h, ids, weights, rows);
    const bool pairs = dispatcher->pair_outputs();  // (set for both paths together)
    if (mine.rows > 0) {
      DI_CUDA_CHECK(cudaMemsetAsync(mine.y, 0, mine.rows * (pairs ? K : 1) * H * sizeof(Bf16)));
      // The received ids are logical (E: served elsewhere); a store of fewer places reads them as places.
      const int64_t places = experts_.capacity();
      const int32_t* place_ids = mine.ids;
      if (places < E) {
        auto* remapped = scratch.alloc<int32_t>(mine.rows * K);
        cuda::remap_expert_ids(mine.ids, mine.rows * K, experts_.device_places(moe_layer), E,
                               static_cast<int32_t>(places), remapped, nullptr);
        place_ids = remapped;
      }
      routed_experts(moe_layer, static_cast<const Bf16*>(mine.x), place_ids, mine.weights, mine.rows, places + 1,
                     static_cast<Bf16*>(mine.y), scratch, nullptr, nullptr, mine.pairs_here, pairs);
    }
    ep.combine(out);
    profiler_.mark("moe:experts (expert parallel)");
    return false;
  }
  if (dispatcher != nullptr && dispatcher->pair_outputs()) {
    host_exchange_pairs(moe_layer, h, ids, weights, rows, out, *dispatcher, scratch);
    profiler_.mark("moe:experts (expert parallel, pair outputs)");
    return false;
  }
  if (dispatcher != nullptr) {
    // Expert parallelism over host memory: dispatched, computed by the store and combined on the host; the
    // routed sum comes back here.
    const HostRows host = rows_to_host(h, ids, weights, rows, H, K, scratch);
    std::vector<float> routed(rows * H, 0.0f);
    add_routed_experts(experts_, dispatcher, moe_layer, host.h.data(), host.ids.data(), host.weights.data(), rows, K,
                       routed.data(), false);
    cuda::add_f32_into_bf16(device_copy(scratch, routed), out, rows * H, nullptr);
    return false;
  }
  return routed_experts(moe_layer, h, ids, weights, rows, E, out, scratch, nullptr, then);
}

void CudaMoe::host_exchange_pairs(int64_t moe_layer, const Bf16* h, const int32_t* ids, const float* weights,
                                  int64_t rows, Bf16* out, ExpertDispatcher& dispatcher, ScratchPool& scratch) const {
  const int64_t H = config_.hidden_size, K = config_.num_experts_per_tok, E = config_.n_routed_experts;
  const HostRows host = rows_to_host(h, ids, weights, rows, H, K, scratch);
  const HostDispatch mine = dispatcher.dispatch(moe_layer, host.h.data(), host.ids.data(), host.weights.data(), rows);
  if (mine.rows > 0) {
    // The received rows (bf16 values, so the fp32 round trip is exact) with logical ids (E: served elsewhere), as
    // the device exchange hands them over, then as places of this rank's store.
    std::vector<int32_t> logical(mine.rows * K);
    for (int64_t i = 0; i < mine.rows * K; ++i) logical[i] = mine.ids[i] >= 0 ? mine.expert_of_id[mine.ids[i]] : E;
    auto* x_recv = scratch.alloc<Bf16>(mine.rows * H);
    cuda::f32_to_bf16(device_copy(scratch, std::vector<float>(mine.x, mine.x + mine.rows * H)), x_recv,
                      mine.rows * H, nullptr);
    const int32_t* place_ids = device_copy(scratch, logical);
    const int64_t places = experts_.capacity();
    if (places < E) {
      auto* remapped = scratch.alloc<int32_t>(mine.rows * K);
      cuda::remap_expert_ids(place_ids, mine.rows * K, experts_.device_places(moe_layer), E,
                             static_cast<int32_t>(places), remapped, nullptr);
      place_ids = remapped;
    }
    auto* y_pairs = scratch.alloc<Bf16>(mine.rows * K * H);
    routed_experts(moe_layer, x_recv, place_ids, nullptr, mine.rows, places + 1, y_pairs, scratch, nullptr, nullptr, -1,
                   true);  // (pair outputs are unweighted)
    auto* y32 = scratch.alloc<float>(mine.rows * K * H);
    cuda::bf16_to_f32(y_pairs, y32, mine.rows * K * H, nullptr);
    DI_CUDA_CHECK(cudaMemcpy(mine.y, y32, mine.rows * K * H * sizeof(float), cudaMemcpyDeviceToHost));
  }
  std::vector<float> pairs(rows * K * H);
  dispatcher.combine_pairs(pairs.data());
  if (rows == 0) return;
  // Each (token, k)'s row at t * K + k: moe_unpermute over the identity adds them in k order, onto the shared expert.
  auto* pairs_dev = scratch.alloc<Bf16>(rows * K * H);
  cuda::f32_to_bf16(device_copy(scratch, pairs), pairs_dev, rows * K * H, nullptr);
  std::vector<int32_t> identity(rows * K);
  std::iota(identity.begin(), identity.end(), 0);
  cuda::moe_unpermute(pairs_dev, device_copy(scratch, identity), weights, rows, K, H, out, nullptr);
}

bool CudaMoe::routed_experts(int64_t moe_layer, const Bf16* x, const int32_t* ids, const float* weights,
                             int64_t rows, int64_t num_ids, Bf16* out, ScratchPool& scratch, cudaEvent_t out_ready,
                             const ResidualNorm* then, int64_t pairs_here, bool pair_rows) const {
  const ModelConfig& c = config_;
  // E: the store's places (every expert without expert parallelism); ids are places, E and above elsewhere.
  const int64_t H = c.hidden_size, E = experts_.capacity(), K = c.num_experts_per_tok, I = c.moe_intermediate_size;
  if (rows == 0) return false;
  const int64_t n = rows * K;
  DI_CHECK(!pair_rows || !experts_stay_on_device(n), "pair outputs come from the permuting paths (--batch-invariant)");
  // The final step: the weighted sum over k into out, or (pair_rows) each entry's row.
  const auto finish = [&](const Bf16* y_perm, const int32_t* row_of) {
    if (pair_rows) cuda::gather_rows(y_perm, row_of, n, H, out, nullptr);
    else cuda::moe_unpermute(y_perm, row_of, weights, rows, K, H, out, nullptr);
  };
  const Bf16* gate_up_w = experts_.gate_up(moe_layer);
  const Bf16* down_w = experts_.down(moe_layer);
  const bool fp4 = experts_.format() == CudaExpertStore::Format::kFp4;
  // (--batch-invariant: experts_stay_on_device is false, so every pair count takes the one path below — FP4: the
  // tiles; bf16: the grouped kernel over the sorted rows — and a pair's bits do not depend on how many pairs share
  // the layer.)
  const Fp4Form form = fp4 ? fp4_form(n, num_ids) : Fp4Form::kTiles;
  // The grouped forms at decode (FP4's and FP8's): the pairs sorted by expert on the device, `experts` streaming each
  // expert's weights once for its pairs into act_perm and y_perm, then the weighted sum over k.
  const auto grouped = [&](const char* mark, auto experts) {
    auto* row_of = scratch.alloc<int32_t>(n);
    auto* token_of_row = scratch.alloc<int32_t>(n);
    auto* offsets = scratch.alloc<int32_t>(num_ids + 1);
    auto* act_perm = scratch.alloc<Bf16>(n * I);
    auto* y_perm = scratch.alloc<float>(n * H);
    cuda::moe_route(ids, rows, K, num_ids, row_of, token_of_row, offsets, nullptr);
    experts(token_of_row, offsets, act_perm, y_perm);
    wait_for(out_ready);
    cuda::moe_grouped_combine(y_perm, ids, row_of, weights, rows, K, E, H, out, nullptr);
    profiler_.mark(mark);
    return false;
  };
  if (form == Fp4Form::kGrouped || form == Fp4Form::kGroupedMma) {
    // FP4 experts at decode, a few pairs an expert: on the CUDA cores with the per-pair kernels' bits (below, without
    // their repeated reads), or, for more pairs an expert, on the tensor cores.
    const bool cuda_cores = form == Fp4Form::kGrouped;
    return grouped(cuda_cores ? "moe:experts (fp4 grouped gemv)" : "moe:experts (fp4 grouped mma)",
                   [&](const int32_t* token_of_row, const int32_t* offsets, Bf16* act_perm, float* y_perm) {
                     (cuda_cores ? cuda::moe_grouped_gemv_fp4 : cuda::moe_grouped_mma_fp4)(
                         x, token_of_row, offsets, E, H, I, experts_.gate_up_fp4(moe_layer),
                         experts_.down_fp4(moe_layer), swiglu_limit_, act_perm, y_perm, nullptr);
                   });
  }
  if (form == Fp4Form::kPerPair) {
    // FP4 experts at decode, fewer pairs than a quarter of the places (or a few experts of many pairs, below 256):
    // matrix-vector kernels, each pair streaming its expert's FP4 rows; entries served elsewhere give zeros.
    auto* act = scratch.alloc<Bf16>(n * I);
    cuda::moe_gemv_gate_up_fp4(x, ids, rows, K, E, H, I, experts_.gate_up_fp4(moe_layer), swiglu_limit_, act,
                               nullptr);
    wait_for(out_ready);
    cuda::moe_gemv_down_fp4(act, ids, weights, rows, K, E, H, I, experts_.down_fp4(moe_layer), out, nullptr);
    profiler_.mark("moe:experts (fp4 gemv)");
    return false;
  }
  if (fp8_grouped(n) && experts_stay_on_device(n))  // FP8 experts at decode, many pairs an expert
    return grouped("moe:experts (fp8 grouped gemv)",
                   [&](const int32_t* token_of_row, const int32_t* offsets, Bf16* act_perm, float* y_perm) {
                     cuda::moe_grouped_gemv_fp8(x, token_of_row, offsets, E, H, I, experts_.gate_up_fp8(moe_layer),
                                                experts_.down_fp8(moe_layer), swiglu_limit_, act_perm, y_perm,
                                                nullptr);
                   });
  if (experts_.format() == CudaExpertStore::Format::kFp8 && experts_stay_on_device(n)) {
    // FP8 experts at decode: matrix-vector kernels on the codes as stored, each pair streaming its expert; entries
    // served elsewhere give zeros.
    auto* act = scratch.alloc<Bf16>(n * I);
    cuda::moe_gemv_gate_up_fp8(x, ids, rows, K, E, H, I, experts_.gate_up_fp8(moe_layer), swiglu_limit_, act,
                               nullptr);
    wait_for(out_ready);
    cuda::moe_gemv_down_fp8(act, ids, weights, rows, K, E, H, I, experts_.down_fp8(moe_layer), out, nullptr);
    profiler_.mark("moe:experts (fp8 gemv)");
    return false;
  }
  if (num_ids == E && n <= kGemvMaxPairs && experts_stay_on_device(n)) {
    // A few tokens: matrix-vector products straight from the routing, no permutation and no host round trip.
    auto* act = scratch.alloc<Bf16>(n * I);
    cuda::moe_gemv_gate_up(x, ids, rows, K, H, I, gate_up_w, swiglu_limit_, act, nullptr);
    wait_for(out_ready);
    cuda::moe_gemv_down(act, ids, weights, rows, K, H, I, down_w, out, nullptr);
    profiler_.mark("moe:experts (gemv)");
    return false;
  }
  auto* row_of = scratch.alloc<int32_t>(n);
  auto* offsets = scratch.alloc<int32_t>(num_ids + 1);
  if (!experts_.quantized() && experts_stay_on_device(n)) {
    // Decode: each expert's weights streamed once for all its rows, the row ranges read on the device, and
    // the rows read from x where they are (no expert-sorted copy).
    auto* token_of_row = scratch.alloc<int32_t>(n);
    auto* act = scratch.alloc<Bf16>(n * I);
    auto* y_perm = scratch.alloc<Bf16>(n * H);
    cuda::moe_route(ids, rows, K, num_ids, row_of, token_of_row, offsets, nullptr);
    // Rows past the real experts (entries served on another rank, weight 0) contribute exact zeros.
    if (num_ids > E) DI_CUDA_CHECK(cudaMemsetAsync(y_perm, 0, n * H * sizeof(Bf16)));
    profiler_.mark("moe:route");
    DI_CUDA_CHECK(cuda::moe_grouped_experts(x, token_of_row, offsets, E, H, I, gate_up_w, down_w, swiglu_limit_, act,
                                            y_perm, expert_sync_.data(), num_sms_, nullptr));
    profiler_.mark("moe:experts (grouped)");
    wait_for(out_ready);
    // With the next norm in the same launch, one launch less a layer (-0.3 to -0.4% a step above batch 16:
    // results/h200/design-measurements.md).
    if (then != nullptr && cuda::moe_unpermute_norm_supports(K, H)) {
      cuda::moe_unpermute_add_rms_norm(y_perm, row_of, weights, rows, K, H, out, then->residual, then->weight,
                                       c.rms_norm_eps, then->normed, nullptr);
      profiler_.mark("moe:unpermute+norm");
      return true;
    }
    cuda::moe_unpermute(y_perm, row_of, weights, rows, K, H, out, nullptr);
    profiler_.mark("moe:unpermute");
    return false;
  }
  // FP8 experts through the FP8 GEMM read x's rows where they are, quantising them into their padded places
  // (moe_pad_sources): no expert-sorted copy and no padded copy of them (two bf16 copies of every pair's row).
  const bool quantise_from_x = !c.batch_invariant && fp8_gemm_.mode == Fp8GemmMode::kOn && fp8_gemm_takes_experts();
  // Otherwise only the rows of this store's experts are copied (moe_permute's copied_experts).
  auto* x_perm =
      quantise_from_x ? nullptr : scratch.alloc<Bf16>((pairs_here >= 0 ? std::min(pairs_here, n) : n) * H);
  const size_t workspace_bytes = cuda::moe_permute_workspace_bytes(n, num_ids);
  void* workspace = scratch.alloc<uint8_t>(workspace_bytes);
  // Entries served elsewhere (expert parallelism's extra id) sort last and are not copied.
  cuda::moe_permute(x, ids, rows, K, H, num_ids, x_perm, row_of, offsets, workspace, workspace_bytes, nullptr, E);
  std::vector<int32_t> host_offsets(num_ids + 1);
  DI_CUDA_CHECK(cudaMemcpy(host_offsets.data(), offsets, (num_ids + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost));
  profiler_.mark("moe:permute+offsets");
  // The rows of this store's experts; the rest (expert parallelism's extra id) are entries served elsewhere.
  const int64_t computed = host_offsets[E];
  if (fp4 && (computed < kFp4TileMaxRowsPerExpert * E || c.batch_invariant)) {
    // FP4 experts at prefill, few rows an expert: each projection one tiled kernel over 64-row tiles of one
    // expert's rows, the codes decoded in shared memory (moe_fp4_gemm.cuh): no bf16 copy, no padded rows.
    const std::vector<cuda::Fp4GemmTile> tiles =
        cuda::fp4_gemm_tiles(std::vector<int32_t>(host_offsets.begin(), host_offsets.begin() + E + 1));
    const cuda::Fp4GemmTile* d_tiles = device_copy(scratch, tiles);
    const auto num_tiles = static_cast<int64_t>(tiles.size());
    auto* gate_up = scratch.alloc<Bf16>(computed * 2 * I);
    auto* act = scratch.alloc<Bf16>(computed * I);
    auto* y_perm = scratch.alloc<Bf16>(n * H);
    cuda::moe_fp4_gemm(x_perm, experts_.gate_up_fp4(moe_layer), d_tiles, num_tiles, 2 * I, H, gate_up, nullptr);
    cuda::silu_mul(gate_up, act, computed, I, swiglu_limit_, nullptr);
    cuda::moe_fp4_gemm(act, experts_.down_fp4(moe_layer), d_tiles, num_tiles, H, I, y_perm, nullptr);
    if (computed < n) DI_CUDA_CHECK(cudaMemsetAsync(y_perm + computed * H, 0, (n - computed) * H * sizeof(Bf16)));
    profiler_.mark("moe:experts (fp4 tiles)");
    wait_for(out_ready);
    finish(y_perm, row_of);
    profiler_.mark("moe:unpermute");
    return false;
  }
  if (c.batch_invariant) {
    // --batch-invariant, bf16 experts: the grouped kernel over the expert-sorted rows at every pair count. A row's
    // products are computed in its own 64-row pass over full k, so its bits do not depend on the other rows (cuBLAS's
    // batched chunks, below, choose their algorithm by the chunk count).
    std::vector<int32_t> identity(n);
    std::iota(identity.begin(), identity.end(), 0);
    if (experts_.quantized()) {  // FP8 experts: every place dequantised first (the kernel waits for them)
      auto* gate_up_all = scratch.alloc<Bf16>(E * 2 * I * H);
      auto* down_all = scratch.alloc<Bf16>(E * H * I);
      experts_.dequantize(moe_layer, 0, E, gate_up_all, down_all);
      gate_up_w = gate_up_all, down_w = down_all;
    }
    auto* act = scratch.alloc<Bf16>(n * I);
    auto* y_perm = scratch.alloc<Bf16>(n * H);
    if (computed < n) DI_CUDA_CHECK(cudaMemsetAsync(y_perm + computed * H, 0, (n - computed) * H * sizeof(Bf16)));
    DI_CUDA_CHECK(cuda::moe_grouped_experts(x_perm, device_copy(scratch, identity), offsets, E, H, I, gate_up_w, down_w,
                                            swiglu_limit_, act, y_perm, expert_sync_.data(), num_sms_, nullptr));
    profiler_.mark("moe:experts (grouped, batch-invariant)");
    wait_for(out_ready);
    finish(y_perm, row_of);
    return false;
  }
  // Many rows: each expert's rows padded to whole chunks, every projection one batched GEMM of uniform chunks
  // (cuBLAS tiles it far better than the grouped call's ragged groups); the entries served elsewhere (expert
  // parallelism's extra id) point at a zero row after the chunks. bf16 experts under expert parallelism: one
  // grouped GEMM over the real experts.
  const bool chunked = num_ids == E || experts_.quantized();
  std::vector<int32_t> chunk_expert, padded_offsets(E + 1);
  for (int64_t e = 0; chunked && e < E; ++e) {
    padded_offsets[e] = static_cast<int32_t>(chunk_expert.size() * kExpertChunk);
    const int64_t chunks = (host_offsets[e + 1] - host_offsets[e] + kExpertChunk - 1) / kExpertChunk;
    chunk_expert.insert(chunk_expert.end(), chunks, static_cast<int32_t>(e));
  }
  const int64_t m = chunked ? static_cast<int64_t>(chunk_expert.size()) * kExpertChunk : n;  // GEMM rows
  padded_offsets[E] = static_cast<int32_t>(m);
  auto* gate_up = scratch.alloc<Bf16>(m * 2 * I);
  auto* act = quantise_from_x ? nullptr : scratch.alloc<Bf16>(m * I);  // (quantised from gate_up there, never stored)
  auto* y_perm = scratch.alloc<Bf16>((m + 1) * H);
  if (chunked && computed < n) DI_CUDA_CHECK(cudaMemsetAsync(y_perm + m * H, 0, H * sizeof(Bf16)));
  if (quantise_from_x) {
    auto* sources = scratch.alloc<int32_t>(m);
    cuda::moe_pad_sources(offsets, device_copy(scratch, padded_offsets), E, n, K, m, row_of, sources, nullptr);
    fp8_gemm_experts(moe_layer, x, sources, chunk_expert, gate_up, y_perm, scratch);
  } else if (chunked) {
    auto* x_pad = scratch.alloc<Bf16>(m * H);
    cuda::moe_pad_rows(x_perm, offsets, device_copy(scratch, padded_offsets), E, n, H, x_pad, row_of, nullptr);
    void** pointers = scratch.alloc<void*>(2 * 3 * chunk_expert.size());
    if (experts_.quantized()) {
      chunked_quantized_experts(moe_layer, x_pad, chunk_expert, gate_up, act, y_perm, pointers, scratch);
    } else {
      DI_CUBLAS_CHECK(cuda::chunked_gemm_bf16(cublas_.get(), x_pad, gate_up_w, gate_up, chunk_expert,
                                              kExpertChunk, 2 * I, H, pointers));
      cuda::silu_mul(gate_up, act, m, I, swiglu_limit_, nullptr);
      DI_CUBLAS_CHECK(cuda::chunked_gemm_bf16(cublas_.get(), act, down_w, y_perm, chunk_expert, kExpertChunk, H,
                                              I, pointers + 3 * chunk_expert.size()));
    }
  } else {
    void** pointers = scratch.alloc<void*>(2 * 3 * E);  // one set per grouped GEMM (the copies are asynchronous)
    DI_CUBLAS_CHECK(cuda::grouped_gemm_bf16(cublas_.get(), x_perm, gate_up_w, gate_up, host_offsets.data(), E,
                                            2 * I, H, pointers));
    cuda::silu_mul(gate_up, act, n, I, swiglu_limit_, nullptr);
    DI_CUBLAS_CHECK(cuda::grouped_gemm_bf16(cublas_.get(), act, down_w, y_perm, host_offsets.data(), E, H, I,
                                            pointers + 3 * E));
    if (host_offsets[E] < n)
      DI_CUDA_CHECK(cudaMemsetAsync(y_perm + host_offsets[E] * H, 0, (n - host_offsets[E]) * H * sizeof(Bf16)));
  }
  profiler_.mark("moe:experts");
  wait_for(out_ready);
  finish(y_perm, row_of);
  profiler_.mark("moe:unpermute");
  return false;
}

bool CudaMoe::fp8_gemm_takes_experts() const {
  const int64_t H = config_.hidden_size, I = config_.moe_intermediate_size;
  const auto scales = cuda::Fp8BlockScales::fp32(nullptr, static_cast<int32_t>(experts_.fp8_block()));
  return experts_.format() == CudaExpertStore::Format::kFp8 && fp8_gemm_.mode != Fp8GemmMode::kOff &&
         cuda::fp8_gemm_supports(kExpertChunk, 2 * I, H, scales, 2 * I) &&
         cuda::fp8_gemm_supports(kExpertChunk, H, I, scales, H);
}

void CudaMoe::fp8_gemm_experts(int64_t moe_layer, const Bf16* x, const int32_t* x_sources,
                               const std::vector<int32_t>& chunk_expert, Bf16* gate_up, Bf16* y_perm,
                               ScratchPool& scratch) const {
  const int64_t H = config_.hidden_size, I = config_.moe_intermediate_size, G = cuda::kFp8GemmGroup;
  const auto chunks = static_cast<int64_t>(chunk_expert.size());
  const int64_t m = chunks * kExpertChunk, stride = cuda::fp8_activation_scale_stride(m);
  const cudaStream_t stream = cudaStreamPerThread;
  const auto [codes, scales] = fp8_activations(scratch, m, std::max(H, I));  // each projection's input in turn
  const size_t workspace_bytes = std::max(cuda::fp8_gemm_workspace_bytes(m, 2 * I, H),
                                          cuda::fp8_gemm_workspace_bytes(m, H, I));
  void* workspace = workspace_bytes > 0 ? scratch.alloc<uint8_t>(workspace_bytes) : nullptr;
  // One projection of the rows quantised into codes and scales: each expert's run of chunks (rows r0 .. r0 + rows)
  // against its weight (expert e's rows of the stacked codes and their scales).
  const auto project = [&](int64_t k, const cuda::Fp8Rows& w, int64_t n, Bf16* y) {
    DI_CUDA_CHECK(cudaGetLastError());  // (CUTLASS's launch clears a pending error)
    for (int64_t c0 = 0; c0 < chunks;) {
      int64_t c1 = c0;
      while (c1 < chunks && chunk_expert[c1] == chunk_expert[c0]) ++c1;
      const int64_t e = chunk_expert[c0], r0 = c0 * kExpertChunk, rows = (c1 - c0) * kExpertChunk;
      DI_CHECK(cuda::fp8_gemm(codes + r0 * k, scales + r0, w.codes + e * n * k, w.scales + e * (n / G) * (k / G),
                              y + r0 * n, n, rows, n, k, workspace, workspace_bytes, stream, stride),
               "the FP8 GEMM refused expert {}'s {} x {} x {}", e, rows, n, k);
      c0 = c1;
    }
  };
  cuda::quantize_fp8_activations(x, H, m, H, codes, scales, stream, x_sources);
  project(H, experts_.gate_up_fp8(moe_layer), 2 * I, gate_up);
  // silu(gate) * up straight into codes (act is not stored: quantize_fp8_silu_mul gives silu_mul's bits' codes).
  cuda::quantize_fp8_silu_mul(gate_up, m, I, swiglu_limit_, codes, scales, stream);
  project(I, experts_.down_fp8(moe_layer), H, y_perm);
}

void CudaMoe::chunked_quantized_experts(int64_t moe_layer, Bf16* x_pad, const std::vector<int32_t>& chunk_expert,
                                        Bf16* gate_up, Bf16* act, Bf16* y_perm, void** pointers,
                                        ScratchPool& scratch) const {
  const int64_t H = config_.hidden_size, I = config_.moe_intermediate_size, E = experts_.capacity();
  const auto chunks = static_cast<int64_t>(chunk_expert.size());
  // (The FP8 GEMM itself, DEEPINFER_FP8_GEMM's default, is routed_experts' fp8_gemm_experts, before any copy.)
  const bool emulated = fp8_gemm_.mode == Fp8GemmMode::kEmulated && fp8_gemm_takes_experts();
  // DEEPINFER_FP8_GEMM=emulate: the activations as the FP8 GEMM sees them into the dequantised experts' GEMMs.
  if (emulated) as_fp8_gemm_sees(x_pad, chunks * kExpertChunk, H, x_pad, scratch, cudaStreamPerThread);
  // kDequantExperts experts at a time dequantised to bf16, then the GEMMs of their chunks (contiguous: the chunks
  // are in expert order).
  auto* w_gate_up = scratch.alloc<Bf16>(kDequantExperts * 2 * I * H);
  auto* w_down = scratch.alloc<Bf16>(kDequantExperts * H * I);
  int64_t c0 = 0;
  for (int64_t e0 = 0; e0 < E && c0 < chunks; e0 += kDequantExperts) {
    const int64_t e1 = std::min(E, e0 + kDequantExperts);
    int64_t c1 = c0;
    while (c1 < chunks && chunk_expert[c1] < e1) ++c1;
    if (c1 == c0) continue;
    std::vector<int32_t> local(chunk_expert.begin() + c0, chunk_expert.begin() + c1);
    for (int32_t& e : local) e -= static_cast<int32_t>(e0);
    experts_.dequantize(moe_layer, e0, e1 - e0, w_gate_up, w_down);
    const int64_t row0 = c0 * kExpertChunk, rows = (c1 - c0) * kExpertChunk;
    DI_CUBLAS_CHECK(cuda::chunked_gemm_bf16(cublas_.get(), x_pad + row0 * H, w_gate_up, gate_up + row0 * 2 * I, local,
                                            kExpertChunk, 2 * I, H, pointers + 3 * c0));
    cuda::silu_mul(gate_up + row0 * 2 * I, act + row0 * I, rows, I, swiglu_limit_, nullptr);
    if (emulated) as_fp8_gemm_sees(act + row0 * I, rows, I, act + row0 * I, scratch, cudaStreamPerThread);
    DI_CUBLAS_CHECK(cuda::chunked_gemm_bf16(cublas_.get(), act + row0 * I, w_down, y_perm + row0 * H, local,
                                            kExpertChunk, H, I, pointers + 3 * (chunks + c0)));
    c0 = c1;
  }
}

}  // namespace deepinfer
