// The block manager's prefix cache: registration of filled blocks, hits on whole-block prefixes short of the last
// token, blocks held by several sequences, and eviction of the least recently released when blocks run short.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "src/engine/block_manager.h"

namespace deepinfer {
namespace {

constexpr int64_t kBlock = 64;

Sequence sequence_of(std::vector<int32_t> tokens) {
  Sequence seq;
  seq.tokens = std::move(tokens);
  return seq;
}

std::vector<int32_t> tokens_from(int32_t first, int64_t n) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// A sequence prefilled whole: its blocks taken, its tokens cached, its filled blocks registered.
void prefill(BlockManager& blocks, Sequence& seq) {
  blocks.match_prefix(seq);
  blocks.grow(seq, seq.num_tokens());
  seq.num_cached = seq.num_tokens();
  blocks.register_full_blocks(seq);
}

TEST(PrefixCache, APromptStartingWithCachedBlocksTakesThem) {
  BlockManager blocks(16, kBlock, true);
  Sequence a = sequence_of(tokens_from(10, 200));
  prefill(blocks, a);
  EXPECT_EQ(blocks.hit_tokens(), 0);
  blocks.release(a);
  EXPECT_EQ(blocks.num_free_blocks(), 16);  // registered blocks still count as takeable

  std::vector<int32_t> b_tokens = tokens_from(10, 150);
  b_tokens.insert(b_tokens.end(), {7, 7, 7, 7, 7});
  Sequence b = sequence_of(b_tokens);
  EXPECT_EQ(blocks.match_prefix(b), 2 * kBlock);  // blocks 0 and 1; block 2 differs
  EXPECT_EQ(b.num_cached, 2 * kBlock);
  EXPECT_EQ(b.block_table.size(), 2u);
  // A prompt that is exactly two cached blocks long takes one: its last token must run.
  Sequence c = sequence_of(tokens_from(10, 128));
  EXPECT_EQ(blocks.match_prefix(c), kBlock);
  EXPECT_EQ(c.block_table[0], b.block_table[0]);  // the same physical block, held by both
  EXPECT_EQ(blocks.hit_tokens(), 3 * kBlock);
  // A prompt that differs in its first block takes nothing.
  std::vector<int32_t> d_tokens = tokens_from(10, 200);
  d_tokens[3] = 9999;
  Sequence d = sequence_of(d_tokens);
  EXPECT_EQ(blocks.match_prefix(d), 0);
}

TEST(PrefixCache, HeldBlocksAreNotEvictedAndReleasedOnesGoLeastRecentFirst) {
  BlockManager blocks(6, kBlock, true);
  Sequence a = sequence_of(tokens_from(0, 3 * kBlock));
  prefill(blocks, a);
  Sequence b = sequence_of(tokens_from(1000, 3 * kBlock));
  prefill(blocks, b);
  EXPECT_EQ(blocks.num_free_blocks(), 0);
  blocks.release(a);  // a's blocks released first, then b's
  blocks.release(b);
  // Four fresh blocks evict a's three (least recently released) and one of b's.
  Sequence fresh = sequence_of(tokens_from(5000, 4 * kBlock));
  blocks.grow(fresh, fresh.num_tokens());
  Sequence a_again = sequence_of(tokens_from(0, 3 * kBlock + 1));
  EXPECT_EQ(blocks.match_prefix(a_again), 0);
  Sequence b_again = sequence_of(tokens_from(1000, 3 * kBlock + 1));
  EXPECT_GE(blocks.match_prefix(b_again), kBlock);  // b's first blocks survive (its last block went first)
  // A held block is never handed out: everything is held now or gone.
  EXPECT_EQ(blocks.num_free_blocks(), 6 - 4 - static_cast<int64_t>(b_again.block_table.size()));
}

TEST(PrefixCache, OffByDefault) {
  BlockManager blocks(4, kBlock);
  Sequence a = sequence_of(tokens_from(0, 2 * kBlock));
  prefill(blocks, a);
  blocks.release(a);
  Sequence b = sequence_of(tokens_from(0, 2 * kBlock + 5));
  EXPECT_EQ(blocks.match_prefix(b), 0);
  EXPECT_EQ(blocks.num_free_blocks(), 4);
}

}  // namespace
}  // namespace deepinfer
