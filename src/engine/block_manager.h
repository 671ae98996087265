// BlockManager: hands out the KV cache's physical blocks (of MlaKvCache::kBlockSize tokens) to sequences.
// Pure bookkeeping; the cache memory itself lives in the model's MlaKvCache.
#pragma once

#include <cstdint>
#include <vector>

#include "src/engine/sequence.h"

namespace deepinfer {

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t num_free_blocks() const { return static_cast<int64_t>(free_blocks_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Whether the sequence's table can grow to cover `num_tokens` tokens.
  bool can_grow(const Sequence& seq, int64_t num_tokens) const;
  // Grows the table to cover `num_tokens` tokens; precondition: can_grow().
  void grow(Sequence& seq, int64_t num_tokens);
  // Returns every block of the sequence to the free list and empties its table.
  void release(Sequence& seq);

 private:
  int64_t num_blocks_;
  int64_t block_size_;
  std::vector<int32_t> free_blocks_;  // a stack: the most recently freed block is reused first
};

}  // namespace deepinfer
