// BlockManager: hands out the KV cache's physical blocks (of KvCache::kBlockSize tokens) to sequences.
// Pure bookkeeping; the cache memory itself lives in the model's KvCache.
//
// With the prefix cache on, a block that a sequence's cached tokens fill is registered under a hash chained over
// its tokens and every token before it, and kept with its contents when no sequence holds it any more
// (reference-counted; least recently released evicted first when a fresh block is needed). A sequence about to
// prefill takes the registered blocks of its longest prefix of whole blocks, all but its last token, so it
// computes only the rest. A hit is checked token for token against the block and its predecessor, so a hash
// collision cannot hand out another prefix's KV. The KV of a block depends only on the tokens up to its end
// (every model here), which is what makes sharing it exact.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "src/engine/sequence.h"

namespace deepinfer {

// The prefix cache's hash of a block of tokens after the block whose hash is `previous` (0 before the first):
// chained, so it names the whole prefix up to the block's end.
uint64_t chain_block_hash(uint64_t previous, std::span<const int32_t> block_tokens);

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_cache = false);

  // Blocks a sequence can take: free ones and registered ones no sequence holds.
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_blocks_.size() + evictable_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Whether the sequence's table can grow to cover `num_tokens` tokens.
  bool can_grow(const Sequence& seq, int64_t num_tokens) const;
  // Grows the table to cover `num_tokens` tokens; precondition: can_grow().
  void grow(Sequence& seq, int64_t num_tokens);
  // Returns the blocks of the table past those `num_tokens` tokens need (speculative decoding's rejected drafts'
  // rows); they hold no cached token, so none is registered.
  void shrink(Sequence& seq, int64_t num_tokens);
  // Returns every block of the sequence (registered ones kept for later hits) and empties its table.
  void release(Sequence& seq);

  // A slower tier behind the blocks (the engine's KvStore): whether it may hold a block of this chained hash, and
  // filling `block` with block `index` of the sequence (its hash and its predecessor's given; false: it does not
  // hold it whole after all).
  class Tier {
   public:
    virtual ~Tier() = default;
    virtual bool may_hold(uint64_t hash) const = 0;
    virtual bool load(const Sequence& seq, int64_t index, uint64_t hash, uint64_t parent_hash, int32_t block) = 0;
    // > 0: its blocks come without their sliding-window state, and a hit replays (recomputes the window of) that
    // many of its last tokens; 0: its blocks are whole.
    virtual int64_t window_replay_tokens() const { return 0; }
  };
  struct RegisteredBlock {
    int64_t index = 0;
    uint64_t hash = 0, parent_hash = 0;
    int32_t block = 0;
  };

  // Prefix cache (no-ops when off). A sequence with nothing cached and no blocks takes the registered blocks of
  // its longest whole-block prefix short of its last token (where they miss, what `tier` loads into a fresh
  // block) and counts them cached; returns the tokens hit. Blocks a tier loads without window state stay the
  // sequence's own (unregistered), and the sequence replays the hit's last window_replay_tokens() (not fewer than
  // from the first such block): its cached count drops to where the replay starts, its swa_floor and
  // keep_inputs_below are set, and it shares no blocks from then on (a replayed window is approximate).
  int64_t match_prefix(Sequence& seq, Tier* tier = nullptr);
  // Registers the blocks its cached tokens have filled since the last call (after each step); returns them.
  std::vector<RegisteredBlock> register_full_blocks(Sequence& seq);
  int64_t hit_tokens() const { return hit_tokens_; }  // of which loaded_tokens() came from the tier
  int64_t loaded_tokens() const { return loaded_tokens_; }
  int64_t replayed_tokens() const { return replayed_tokens_; }  // of the hit tokens, recomputed by SWA replay

 private:
  int32_t take_block();  // a free block, else the least recently released registered one (unregistered)
  void unregister(int32_t block);
  void register_block(int32_t block, uint64_t hash, const Sequence& seq, int64_t index);
  // The chained hash of block `i` of `seq`'s tokens after `previous`.
  uint64_t chain(uint64_t previous, const Sequence& seq, int64_t i) const;

  int64_t num_blocks_;
  int64_t block_size_;
  bool prefix_cache_;
  std::vector<int32_t> free_blocks_;  // a stack: the most recently freed block is reused first
  // Prefix cache state, per block: holders, registration (hash, predecessor block, tokens), place in evictable_.
  std::vector<int32_t> holders_;
  std::vector<uint64_t> hash_of_;
  std::vector<uint8_t> registered_;
  std::vector<int32_t> previous_of_;
  std::vector<int32_t> tokens_of_;  // [num_blocks * block_size]
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> evictable_;  // registered, held by nobody; least recently released first
  std::vector<std::list<int32_t>::iterator> evictable_at_;
  int64_t hit_tokens_ = 0, loaded_tokens_ = 0, replayed_tokens_ = 0;
};

}  // namespace deepinfer
