#include "src/engine/block_manager.h"

#include <algorithm>

#include "src/core/check.h"
#include "src/core/random.h"

namespace deepinfer {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_cache)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_cache_(prefix_cache) {
  DI_CHECK(num_blocks > 0 && block_size > 0, "bad block manager size {} x {}", num_blocks, block_size);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(static_cast<int32_t>(b));
  if (prefix_cache_) {
    holders_.assign(num_blocks, 0);
    hash_of_.assign(num_blocks, 0);
    registered_.assign(num_blocks, 0);
    previous_of_.assign(num_blocks, -1);
    tokens_of_.assign(num_blocks * block_size, 0);
    evictable_at_.resize(num_blocks, evictable_.end());
  }
}

bool BlockManager::can_grow(const Sequence& seq, int64_t num_tokens) const {
  const int64_t needed = blocks_for(num_tokens) - static_cast<int64_t>(seq.block_table.size());
  return needed <= num_free_blocks();
}

int32_t BlockManager::take_block() {
  if (!free_blocks_.empty()) {
    const int32_t block = free_blocks_.back();
    free_blocks_.pop_back();
    return block;
  }
  DI_CHECK(!evictable_.empty(), "no block to take");
  const int32_t block = evictable_.front();
  evictable_.pop_front();
  evictable_at_[block] = evictable_.end();
  unregister(block);
  return block;
}

void BlockManager::unregister(int32_t block) {
  by_hash_.erase(hash_of_[block]);
  registered_[block] = 0;
}

void BlockManager::grow(Sequence& seq, int64_t num_tokens) {
  DI_CHECK(can_grow(seq, num_tokens), "grow to {} tokens needs more than the {} free blocks", num_tokens,
           num_free_blocks());
  while (static_cast<int64_t>(seq.block_table.size()) < blocks_for(num_tokens)) {
    const int32_t block = take_block();
    if (prefix_cache_) holders_[block] = 1;
    seq.block_table.push_back(block);
  }
}

void BlockManager::shrink(Sequence& seq, int64_t num_tokens) {
  while (static_cast<int64_t>(seq.block_table.size()) > blocks_for(num_tokens)) {
    const int32_t block = seq.block_table.back();
    seq.block_table.pop_back();
    if (prefix_cache_) {
      DI_CHECK(registered_[block] == 0 && holders_[block] == 1, "block {} past a sequence's tokens is shared", block);
      holders_[block] = 0;
    }
    free_blocks_.push_back(block);
  }
}

void BlockManager::release(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    const int32_t block = *it;
    if (!prefix_cache_) {
      free_blocks_.push_back(block);
      continue;
    }
    DI_CHECK(holders_[block] > 0, "block {} released by a sequence that does not hold it", block);
    if (--holders_[block] > 0) continue;
    if (registered_[block] != 0) {
      evictable_at_[block] = evictable_.insert(evictable_.end(), block);
    } else {
      free_blocks_.push_back(block);
    }
  }
  seq.block_table.clear();
  seq.block_hashes.clear();
  // Invariant: no block is ever free twice.
  DI_CHECK(num_free_blocks() <= num_blocks_, "block free list overflow ({} > {})", num_free_blocks(), num_blocks_);
}

uint64_t chain_block_hash(uint64_t previous, std::span<const int32_t> block_tokens) {
  uint64_t h = splitmix64(previous ^ 0x9e3779b97f4a7c15ull);
  for (int32_t token : block_tokens) h = splitmix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(token)));
  return h;
}

uint64_t BlockManager::chain(uint64_t previous, const Sequence& seq, int64_t i) const {
  return chain_block_hash(previous, std::span<const int32_t>(seq.tokens).subspan(i * block_size_, block_size_));
}

void BlockManager::register_block(int32_t block, uint64_t hash, const Sequence& seq, int64_t index) {
  by_hash_[hash] = block;
  hash_of_[block] = hash;
  registered_[block] = 1;
  previous_of_[block] = index == 0 ? -1 : seq.block_table[index - 1];
  std::copy(seq.tokens.begin() + index * block_size_, seq.tokens.begin() + (index + 1) * block_size_,
            tokens_of_.begin() + block * block_size_);
}

int64_t BlockManager::match_prefix(Sequence& seq, Tier* tier) {
  if (!prefix_cache_ || !seq.shares_blocks || seq.num_cached != 0 || !seq.block_table.empty()) return 0;
  const int64_t whole = (seq.num_tokens() - 1) / block_size_;  // the last token always runs (its logits)
  const int64_t replay = tier != nullptr ? tier->window_replay_tokens() : 0;
  int64_t windowless_from = -1;  // the first token whose block came without window state
  uint64_t h = 0;
  for (int64_t i = 0; i < whole; ++i) {
    const uint64_t parent = h;
    h = chain(parent, seq, i);
    const auto found = by_hash_.find(h);
    int32_t block = -1;
    if (found != by_hash_.end() && windowless_from >= 0) break;  // past a replayed window, only the tier's blocks
    if (found != by_hash_.end()) {
      block = found->second;
      const int32_t previous = i == 0 ? -1 : seq.block_table.back();
      if (previous_of_[block] != previous ||
          !std::equal(seq.tokens.begin() + i * block_size_, seq.tokens.begin() + (i + 1) * block_size_,
                      tokens_of_.begin() + block * block_size_))
        break;  // a hash collision: not this prefix
      if (holders_[block]++ == 0) {
        evictable_.erase(evictable_at_[block]);
        evictable_at_[block] = evictable_.end();
      }
    } else {
      if (tier == nullptr || num_free_blocks() == 0 || !tier->may_hold(h)) break;
      block = take_block();
      if (!tier->load(seq, i, h, parent, block)) {
        free_blocks_.push_back(block);
        break;
      }
      holders_[block] = 1;
      loaded_tokens_ += block_size_;
      if (replay > 0 && windowless_from < 0) windowless_from = i * block_size_;
    }
    seq.block_table.push_back(block);
    seq.block_hashes.push_back(h);
    if (registered_[block] == 0 && windowless_from < 0) register_block(block, h, seq, i);
  }
  const int64_t hit = static_cast<int64_t>(seq.block_table.size()) * block_size_;
  hit_tokens_ += hit;
  seq.num_cached = hit;
  if (windowless_from >= 0) {
    const int64_t from = std::max(windowless_from, hit - replay);
    seq.num_cached = from;
    seq.swa_floor = from;
    seq.keep_inputs_below = hit;
    seq.shares_blocks = false;
    replayed_tokens_ += hit - from;
  }
  return hit;
}

std::vector<BlockManager::RegisteredBlock> BlockManager::register_full_blocks(Sequence& seq) {
  std::vector<RegisteredBlock> fresh;
  if (!prefix_cache_ || !seq.shares_blocks) return fresh;
  const int64_t full = std::min<int64_t>(seq.num_cached / block_size_, static_cast<int64_t>(seq.block_table.size()));
  for (auto i = static_cast<int64_t>(seq.block_hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : seq.block_hashes.back();
    const uint64_t h = chain(parent, seq, i);
    seq.block_hashes.push_back(h);
    const int32_t block = seq.block_table[i];
    if (registered_[block] != 0 || by_hash_.count(h) != 0) continue;  // already, or another copy of the prefix
    register_block(block, h, seq, i);
    fresh.push_back({i, h, parent, block});
  }
  return fresh;
}

}  // namespace deepinfer
