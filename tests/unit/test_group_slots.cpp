// The per-group slots of V4.1's compressed entries on the GPU (kernels/group_slots.h): every complete group of a
// sequence gets its own slot, in the block of its last token, so blocks shared by a prefix share their groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kernels/group_slots.h"

namespace deepinfer {
namespace {

TEST(GroupSlots, EveryGroupHasItsOwnSlotInTheBlockOfItsLastToken) {
  constexpr int64_t kBlocks = 9, kPool = 40;
  std::mt19937 rng(5);
  std::vector<int32_t> table(kPool);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  table.resize(kBlocks);
  for (int64_t ratio : {1, 2, 3, 4, 7, 64, 100, 128}) {
    const int64_t per_block = group_slots_per_block(ratio), groups = kBlocks * kGroupBlockTokens / ratio;
    std::set<int64_t> seen;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t slot = group_slot(table.data(), ratio, g);
      const int64_t last_block = (g * ratio + ratio - 1) / kGroupBlockTokens;
      EXPECT_EQ(slot / per_block, table[last_block]) << "ratio " << ratio << ", group " << g;
      EXPECT_TRUE(seen.insert(slot).second) << "ratio " << ratio << ": group " << g << " shares slot " << slot;
    }
  }
}

// Two tables that share their first blocks: the groups ending in those blocks have the same slots.
TEST(GroupSlots, ASharedPrefixSharesItsGroups) {
  const std::vector<int32_t> a = {4, 9, 2, 7}, b = {4, 9, 5, 1};
  for (int64_t ratio : {1, 2, 3, 128}) {
    for (int64_t g = 0; (g * ratio + ratio - 1) / kGroupBlockTokens < 2; ++g)
      EXPECT_EQ(group_slot(a.data(), ratio, g), group_slot(b.data(), ratio, g)) << "ratio " << ratio << ", group " << g;
  }
}

}  // namespace
}  // namespace deepinfer
