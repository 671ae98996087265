#include "src/engine/block_manager.h"

#include "src/core/check.h"

namespace deepinfer {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size) : num_blocks_(num_blocks), block_size_(block_size) {
  DI_CHECK(num_blocks > 0 && block_size > 0, "bad block manager size {} x {}", num_blocks, block_size);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(static_cast<int32_t>(b));
}

bool BlockManager::can_grow(const Sequence& seq, int64_t num_tokens) const {
  const int64_t needed = blocks_for(num_tokens) - static_cast<int64_t>(seq.block_table.size());
  return needed <= num_free_blocks();
}

void BlockManager::grow(Sequence& seq, int64_t num_tokens) {
  DI_CHECK(can_grow(seq, num_tokens), "grow to {} tokens needs more than the {} free blocks", num_tokens,
           num_free_blocks());
  while (static_cast<int64_t>(seq.block_table.size()) < blocks_for(num_tokens)) {
    seq.block_table.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
}

void BlockManager::release(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) free_blocks_.push_back(*it);
  seq.block_table.clear();
  // Invariant: no block is ever free twice.
  DI_CHECK(num_free_blocks() <= num_blocks_, "block free list overflow ({} > {})", num_free_blocks(), num_blocks_);
}

}  // namespace deepinfer
