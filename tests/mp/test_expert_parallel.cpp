// Dispatch/combine against the local reference (every expert computed on this rank), on random routing, random
// token counts (some ranks with none) and placements with and without replicas.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "src/comm/mpi_communicator.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/moe/expert_parallel.h"
#include "tests/mp/mpi_test_util.h"

namespace deepinfer {
namespace {

const DeepseekModel& tiny_model() {
  static const DeepseekModel model = [] {
    const auto path = std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json";
    ModelConfig config = load_model_config(path);
    return DeepseekModel(config, WeightStore::load(config, path, LoadFormat::kDummy, 3));
  }();
  return model;
}

// A plan with every expert once plus random replicas, shuffled over the slots.
ExpertPlacement random_placement(int64_t num_layers, int64_t num_experts, int64_t ep_size, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t slots = ((num_experts + ep_size - 1) / ep_size + 1) * ep_size;  // at least one extra per rank
  std::vector<std::vector<int32_t>> phy2log(num_layers);
  for (auto& row : phy2log) {
    for (int64_t s = 0; s < slots; ++s) row.push_back(static_cast<int32_t>(s < num_experts ? s : rng() % num_experts));
    std::shuffle(row.begin(), row.end(), rng);
  }
  return ExpertPlacement::from_phy2log(phy2log, num_experts, ep_size);
}

// T tokens' rows (normal), top-k weights (positive) and K distinct experts of E each.
struct RandomRouting {
  std::vector<float> x, weights;
  std::vector<int32_t> ids;
};

RandomRouting random_routing(int64_t T, int64_t H, int64_t K, int64_t E, std::mt19937& rng) {
  RandomRouting r{std::vector<float>(T * H), std::vector<float>(T * K), std::vector<int32_t>(T * K)};
  std::normal_distribution<float> normal;
  for (float& v : r.x) v = normal(rng);
  for (float& v : r.weights) v = std::abs(normal(rng));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> experts(E);
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    std::copy_n(experts.begin(), K, r.ids.begin() + t * K);
  }
  return r;
}

void check_against_local(const ExpertPlacement& placement, uint32_t seed) {
  const DeepseekModel& model = tiny_model();
  const ModelConfig& c = model.config();
  MpiCommunicator comm(MPI_COMM_WORLD, 120.0);
  ExpertParallelDispatcher parallel(comm, placement, c.hidden_size, c.num_experts_per_tok);
  std::mt19937 rng(seed + 7919 * comm.rank());
  const int64_t H = c.hidden_size, K = c.num_experts_per_tok, E = c.n_routed_experts;
  for (int round = 0; round < 3; ++round) {
    // Rank 1 never has tokens; the others a random count (zero included).
    const int64_t T = comm.rank() == 1 ? 0 : static_cast<int64_t>(rng() % 9);
    const auto [x, weights, ids] = random_routing(T, H, K, E, rng);
    for (int64_t layer = 0; layer < model.num_moe_layers(); ++layer) {
      std::vector<float> want(T * H, 0.5f), got(T * H, 0.5f);  // both add onto the same base
      add_routed_experts(model.experts(), nullptr, layer, x.data(), ids.data(), weights.data(), T, K, want.data(), false);
      add_routed_experts(model.experts(), &parallel, layer, x.data(), ids.data(), weights.data(), T, K, got.data(),
                         false);
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < T * H; ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
      }
      EXPECT_TRUE(T == 0 || std::sqrt(diff / norm) < 1e-6)
          << "rank " << comm.rank() << " layer " << layer << " error " << std::sqrt(diff / norm);
    }
  }
  EXPECT_TRUE(testing::all_ranks(!::testing::Test::HasFailure()));
}

TEST(ExpertParallel, DefaultPlacementMatchesLocalExperts) {
  const ModelConfig& c = tiny_model().config();
  check_against_local(ExpertPlacement::make_default(tiny_model().num_moe_layers(), c.n_routed_experts, testing::world_size()), 11);
}

TEST(ExpertParallel, ReplicatedPlacementMatchesLocalExperts) {
  const ModelConfig& c = tiny_model().config();
  check_against_local(random_placement(tiny_model().num_moe_layers(), c.n_routed_experts, testing::world_size(), 5), 23);
}

// --batch-invariant's pair outputs: every (token, k) gets back exactly its own expert output from whichever rank
// served it (replicas included), and combine() adds them weighted, in k order: the one-rank entry-order sums' bits.
TEST(ExpertParallel, PairOutputsGiveEachEntryItsOwnOutput) {
  const DeepseekModel& model = tiny_model();
  const ModelConfig& c = model.config();
  MpiCommunicator comm(MPI_COMM_WORLD, 120.0);
  const ExpertPlacement placement = random_placement(model.num_moe_layers(), c.n_routed_experts, comm.size(), 9);
  ExpertParallelDispatcher parallel(comm, placement, c.hidden_size, c.num_experts_per_tok);
  parallel.set_pair_outputs(true);
  const int64_t H = c.hidden_size, K = c.num_experts_per_tok, E = c.n_routed_experts;
  std::mt19937 rng(31 + comm.rank());
  const int64_t T = comm.rank() == 1 ? 0 : 5 + comm.rank();
  const auto [x, weights, ids] = random_routing(T, H, K, E, rng);
  const ExpertStore& store = model.experts();
  for (int64_t layer = 0; layer < model.num_moe_layers(); ++layer) {
    for (bool summed : {false, true}) {
      const HostDispatch mine = parallel.dispatch(layer, x.data(), ids.data(), weights.data(), T);
      for (int64_t r = 0; r < mine.rows; ++r)  // the block: each served entry's own output at (r, k)
        for (int64_t k = 0; k < K; ++k)
          if (const int32_t id = mine.ids[r * K + k]; id >= 0)
            store.compute(layer, mine.expert_of_id[id], mine.x + r * H, 1, mine.y + (r * K + k) * H);
      if (summed) {
        std::vector<float> want(T * H, 0.5f), got(T * H, 0.5f);
        add_routed_experts(store, nullptr, layer, x.data(), ids.data(), weights.data(), T, K, want.data(), true);
        parallel.combine(got.data());
        // (EXPECT, not ASSERT: a rank that returned early would leave the others in the exchanges)
        EXPECT_EQ(got, want) << "rank " << comm.rank() << " layer " << layer;
        continue;
      }
      std::vector<float> pairs(T * K * H), own(H);
      parallel.combine_pairs(pairs.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k) {
          store.compute(layer, ids[t * K + k], x.data() + t * H, 1, own.data());
          EXPECT_TRUE(std::equal(own.begin(), own.end(), pairs.begin() + (t * K + k) * H))
              << "rank " << comm.rank() << " token " << t << " entry " << k;
        }
    }
  }
  EXPECT_TRUE(testing::all_ranks(!::testing::Test::HasFailure()));
}

TEST(ExpertPlacement, DefaultSpreadsAndReplicatesDeterministically) {
  const ExpertPlacement wide = ExpertPlacement::make_default(2, 12, 64);  // more ranks than experts
  EXPECT_EQ(wide.num_physical(), 64);
  for (int64_t e = 0; e < 12; ++e) EXPECT_GE(wide.replicas(0, e).size(), 5u);
  const ExpertPlacement narrow = ExpertPlacement::make_default(2, 16, 4);
  EXPECT_EQ(narrow.slots_per_rank(), 4);
  EXPECT_EQ(narrow.owner_of_slot(narrow.replicas(1, 13)[0]), 3);
  EXPECT_TRUE(narrow.rank_holds(0, 0, 3));
  EXPECT_FALSE(narrow.rank_holds(0, 0, 4));
  // A local replica wins; otherwise the choice depends only on (source rank, token).
  EXPECT_EQ(wide.owner_of_slot(wide.pick_slot(0, 5, 17, 3)), 17);  // slot 17 holds expert 17 % 12 = 5
  EXPECT_EQ(wide.pick_slot(0, 5, 2, 3), wide.pick_slot(0, 5, 2, 3));
  EXPECT_THROW(ExpertPlacement::from_phy2log({{0, 1, 2}}, 4, 1), InputError);  // expert 3 has no slot
}

}  // namespace
}  // namespace deepinfer
