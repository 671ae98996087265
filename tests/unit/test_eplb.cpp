#include <gtest/gtest.h>

#include <random>

#include "src/core/error.h"
#include "src/moe/eplb.h"
#include "src/moe/expert_placement.h"

namespace deepinfer {
namespace {

TEST(Eplb, ReproducesDeepSeeksPublishedExample) {
  const std::vector<std::vector<double>> weight = {{90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
                                                   {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}};
  const EplbPlan plan = rebalance_experts(weight, 16, 4, 2, 8);
  const std::vector<std::vector<int32_t>> expected = {{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
                                                      {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}};
  EXPECT_EQ(plan.phy2log, expected);
  for (size_t l = 0; l < weight.size(); ++l)
    for (size_t e = 0; e < 12; ++e)
      for (int32_t slot : plan.log2phy[l][e])
        if (slot >= 0) {
          EXPECT_EQ(plan.phy2log[l][slot], static_cast<int32_t>(e));
        }
}

TEST(Eplb, RandomLoadsGivePlansThatBalance) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t nodes = 1 + rng() % 3, gpus = nodes * (1 + rng() % 4), groups = nodes * (1 + rng() % 3);
    const int64_t experts = groups * gpus * (1 + rng() % 3);  // divisible by groups and GPUs
    const int64_t replicas = experts + gpus * (rng() % 3);     // up to 2 redundant slots per GPU
    // The loads EPLB exists for: uniform background traffic and a few hot experts.
    std::vector<std::vector<double>> weight(3, std::vector<double>(experts));
    for (auto& row : weight) {
      for (double& w : row) w = static_cast<double>(rng() % 100);
      for (int hot = 0; hot < 3; ++hot) row[rng() % experts] += 2000.0 + rng() % 3000;
    }
    const EplbPlan plan = rebalance_experts(weight, replicas, groups, nodes, gpus);
    for (size_t l = 0; l < weight.size(); ++l) {
      std::vector<int32_t> seen(experts, 0);
      for (int32_t e : plan.phy2log[l]) ++seen[e];
      for (int64_t e = 0; e < experts; ++e) {
        ASSERT_GE(seen[e], 1) << "expert " << e << " has no replica";
        EXPECT_EQ(seen[e], plan.logcnt[l][e]);
      }
      ASSERT_EQ(static_cast<int64_t>(plan.phy2log[l].size()), replicas);  // R / gpus slots per GPU by layout
      // "Before": the engine's default placement without redundancy (expert e in slot e, E / gpus per GPU).
      std::vector<int32_t> plain(experts);
      for (int64_t s = 0; s < experts; ++s) plain[s] = static_cast<int32_t>(s);
      EXPECT_LE(gpu_imbalance(weight[l], plan.phy2log[l], gpus), gpu_imbalance(weight[l], plain, gpus) + 1e-9)
          << "trial " << trial;
      // The plan loads into the engine's placement.
      EXPECT_NO_THROW(ExpertPlacement::from_phy2log(plan.phy2log, experts, gpus));
    }
  }
}

TEST(Eplb, RejectsShapesThatCannotBePlaced) {
  const std::vector<std::vector<double>> w = {std::vector<double>(12, 1.0)};
  EXPECT_THROW(rebalance_experts(w, 16, 5, 1, 8), InputError);   // 12 % 5
  EXPECT_THROW(rebalance_experts(w, 16, 4, 3, 8), InputError);   // 8 GPUs over 3 nodes
  EXPECT_THROW(rebalance_experts(w, 18, 4, 2, 8), InputError);   // 18 % 8
  EXPECT_THROW(rebalance_experts(w, 8, 4, 2, 8), InputError);    // 8 < 12
  EXPECT_NO_THROW(rebalance_experts(w, 16, 3, 2, 8));            // 3 % 2 != 0: the global policy
}

}  // namespace
}  // namespace deepinfer
