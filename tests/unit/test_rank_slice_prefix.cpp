// RankSliceDispatcher::prefix: the layout of fewer tokens taken from one drawn for more (speculative decode points
// of many step sizes share one draw): the whole prefix is the draw itself, and a shorter one keeps exactly the rows
// and pairs of its tokens, with the exchange counted as a direct draw counts it.
#include <gtest/gtest.h>

#include "src/moe/expert_placement.h"
#include "src/moe/rank_slice_dispatcher.h"

namespace deepinfer {
namespace {

constexpr int64_t kLayers = 3, kExperts = 64, kRanks = 8, kTopK = 6, kHidden = 16;

RankSliceDispatcher make_slicer(int rank) {
  return RankSliceDispatcher(ExpertPlacement::make_default(kLayers, kExperts, kRanks, 10), rank, kHidden,
                             SyntheticRouting("zipf:1.2", 3, kLayers, kExperts, kTopK));
}

TEST(RankSlicePrefix, OfTheWholeDrawIsTheDraw) {
  const RankSliceDispatcher slicer = make_slicer(2);
  const SliceLayout drawn = slicer.layout(1, 48);
  const SliceLayout same = slicer.prefix(drawn, 1, 48);
  EXPECT_EQ(same.source_token, drawn.source_token);
  EXPECT_EQ(same.slots, drawn.slots);
  EXPECT_EQ(same.weights, drawn.weights);
  EXPECT_EQ(same.own_rows, drawn.own_rows);
  EXPECT_EQ(same.own_routed, drawn.own_routed);
  EXPECT_EQ(same.pairs_of_slot, drawn.pairs_of_slot);
  EXPECT_EQ(same.exchange.tokens_sent, drawn.exchange.tokens_sent);
  EXPECT_EQ(same.exchange.dispatch_bytes, drawn.exchange.dispatch_bytes);
  EXPECT_EQ(same.exchange.combine_bytes, drawn.exchange.combine_bytes);
  EXPECT_EQ(same.exchange.tokens_received, drawn.exchange.tokens_received);
}

TEST(RankSlicePrefix, KeepsTheRowsOfItsTokensOnly) {
  const RankSliceDispatcher slicer = make_slicer(5);
  const SliceLayout drawn = slicer.layout(2, 64);
  for (int64_t n : {1, 17, 40, 63}) {
    const SliceLayout p = slicer.prefix(drawn, 2, n);
    int64_t rows = 0, pairs = 0;
    for (int64_t r = 0; r < drawn.rows(); ++r) {
      if (drawn.source_token[r] >= n) continue;
      ++rows;
      for (int64_t k = 0; k < kTopK; ++k) pairs += drawn.slots[r * kTopK + k] >= 0 ? 1 : 0;
    }
    EXPECT_EQ(p.rows(), rows) << n;
    int64_t slot_pairs = 0;
    for (int64_t c : p.pairs_of_slot) slot_pairs += c;
    EXPECT_EQ(slot_pairs, pairs) << n;
    for (int32_t t : p.source_token) EXPECT_LT(t, n);
    EXPECT_EQ(static_cast<int64_t>(p.own_routed.size()), n * kTopK);
    for (const auto& [token, row] : p.own_rows) {
      EXPECT_LT(token, n);
      EXPECT_EQ(p.source_token[row], token);
    }
    EXPECT_EQ(p.exchange.combine_bytes, (p.rows() - static_cast<int64_t>(p.own_rows.size())) * kHidden * 4);
    EXPECT_LE(p.exchange.tokens_sent, drawn.exchange.tokens_sent);
  }
}

}  // namespace
}  // namespace deepinfer
