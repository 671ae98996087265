// Where DeepSeek-V4.1's compressed entry g of a sequence (its tokens [g r, g r + r)) lives in a paged per-group
// cache, for the host (the step plan) and the device alike: in the block of the group's last token, at the
// group's index among the groups that end in that block, ceil(64 / r) slots a block. So the slot exists once the
// group is complete, and a block's groups depend only on the tokens up to its end: blocks shared by a common
// prefix share their groups, as they share their tokens' entries.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace deepinfer {

inline constexpr int64_t kGroupBlockTokens = 64;  // KvCache::kBlockSize

DEEPINFER_HOST_DEVICE inline int64_t group_slots_per_block(int64_t ratio) {
  return (kGroupBlockTokens + ratio - 1) / ratio;
}

DEEPINFER_HOST_DEVICE inline int64_t group_slot(const int32_t* block_table, int64_t ratio, int64_t g) {
  const int64_t block = (g * ratio + ratio - 1) / kGroupBlockTokens;
  const int64_t first_in_block = kGroupBlockTokens * block / ratio;  // the first group ending in this block
  return static_cast<int64_t>(block_table[block]) * group_slots_per_block(ratio) + g - first_in_block;
}

}  // namespace deepinfer
