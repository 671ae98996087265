// Bookkeeping without a model: block allocation, chunked prefill, decode batches, preemption, stops.
#include <gtest/gtest.h>

#include "src/engine/scheduler.h"

namespace deepinfer {
namespace {

struct Fixture {
  Request request;
  std::vector<std::unique_ptr<Sequence>> seqs;
  Sequence* add(Scheduler& scheduler, int64_t prompt_len) {
    auto seq = std::make_unique<Sequence>();
    seq->idx = static_cast<int64_t>(seqs.size());
    seq->request = &request;
    seq->tokens.assign(prompt_len, 7);
    seq->num_prompt_tokens = prompt_len;
    scheduler.add(seq.get());
    seqs.push_back(std::move(seq));
    return seqs.back().get();
  }
};

TEST(BlockManager, GrowsAndReleasesWholeBlocks) {
  BlockManager blocks(4, 64);
  Sequence seq;
  EXPECT_TRUE(blocks.can_grow(seq, 256));
  EXPECT_FALSE(blocks.can_grow(seq, 257));
  blocks.grow(seq, 65);
  EXPECT_EQ(seq.block_table.size(), 2u);
  EXPECT_EQ(blocks.num_free_blocks(), 2);
  blocks.release(seq);
  EXPECT_EQ(blocks.num_free_blocks(), 4);
  EXPECT_TRUE(seq.block_table.empty());
}

TEST(Scheduler, ChunksPrefillThenDecodes) {
  BlockManager blocks(16, 64);
  Fixture f;
  f.request.max_new_tokens = 3;
  Scheduler scheduler({.max_running = 8, .chunk_tokens = 100, .max_model_len = 1000}, blocks, {1});
  Sequence* a = f.add(scheduler, 150);
  Sequence* b = f.add(scheduler, 20);

  ScheduledBatch step1 = scheduler.schedule();  // a: 100 of 150
  ASSERT_TRUE(step1.is_prefill);
  ASSERT_EQ(step1.items.size(), 1u);
  EXPECT_EQ(step1.items[0].num_new, 100);
  EXPECT_FALSE(step1.items[0].samples);
  scheduler.postprocess(step1, std::vector<int32_t>{});
  EXPECT_EQ(a->num_cached, 100);

  ScheduledBatch step2 = scheduler.schedule();  // a: the last 50 (samples), b: 20 (samples)
  ASSERT_EQ(step2.items.size(), 2u);
  EXPECT_EQ(step2.items[0].num_new, 50);
  EXPECT_EQ(step2.items[1].num_new, 20);
  scheduler.postprocess(step2, {11, 12});
  EXPECT_EQ(a->tokens.back(), 11);
  EXPECT_EQ(b->tokens.back(), 12);

  ScheduledBatch step3 = scheduler.schedule();  // decode both
  EXPECT_FALSE(step3.is_prefill);
  ASSERT_EQ(step3.items.size(), 2u);
  scheduler.postprocess(step3, {1, 13});  // a stops on EOS
  EXPECT_EQ(a->finish_reason, FinishReason::kStop);
  EXPECT_EQ(a->status, SequenceStatus::kFinished);
  EXPECT_TRUE(a->block_table.empty());

  scheduler.postprocess(scheduler.schedule(), {14});  // b reaches max_new_tokens = 3
  EXPECT_EQ(b->finish_reason, FinishReason::kLength);
  EXPECT_FALSE(scheduler.has_unfinished());
  EXPECT_EQ(blocks.num_free_blocks(), 16);
}

TEST(Scheduler, PreemptsTheNewestWhenDecodeRunsOutOfBlocks) {
  BlockManager blocks(2, 64);
  Fixture f;
  f.request.max_new_tokens = 100;
  Scheduler scheduler({.max_running = 8, .chunk_tokens = 4096, .max_model_len = 1000}, blocks, {});
  Sequence* a = f.add(scheduler, 64);
  Sequence* b = f.add(scheduler, 64);
  scheduler.postprocess(scheduler.schedule(), {5, 6});  // both prefilled, one block each, 65 tokens each
  ScheduledBatch decode = scheduler.schedule();         // a needs a second block: none free -> b preempted
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  ASSERT_EQ(decode.items.size(), 1u);
  EXPECT_EQ(decode.items[0].seq, a);
  EXPECT_EQ(b->num_cached, 0);
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
  EXPECT_EQ(b->num_tokens(), 65);  // keeps its generated token; recomputes it later
}

// Overlapped scheduling: step N + 1 is scheduled after step N's launched() but before its completed(). A sequence
// runs on its placeholder; one that stops at N has run N + 1 too, whose token is dropped; one whose token in flight
// is its last leaves the running set at once; the cache and the blocks end as in order.
TEST(Scheduler, OverlappedStepsTakeTheirTokensLate) {
  BlockManager blocks(16, 64);
  Fixture f;
  f.request.max_new_tokens = 3;
  Scheduler scheduler({.max_running = 8, .chunk_tokens = 4096, .max_model_len = 1000}, blocks, {1});
  Sequence* a = f.add(scheduler, 10);
  Sequence* b = f.add(scheduler, 20);

  const ScheduledBatch prefill = scheduler.schedule();
  scheduler.launched(prefill);
  EXPECT_EQ(a->tokens.back(), kPendingToken);
  EXPECT_EQ(a->num_cached, 10);
  const ScheduledBatch decode1 = scheduler.schedule();  // both run on their placeholders
  ASSERT_EQ(decode1.items.size(), 2u);
  EXPECT_FALSE(decode1.is_prefill);
  scheduler.launched(decode1);
  EXPECT_EQ(a->num_pending, 2);
  EXPECT_EQ(scheduler.completed(prefill, {11, 21}), (std::vector<bool>{true, true}));
  EXPECT_EQ(a->tokens[10], 11);
  EXPECT_EQ(a->num_known_tokens(), 11);

  const ScheduledBatch decode2 = scheduler.schedule();
  scheduler.launched(decode2);  // the third token of both is in flight: their last
  EXPECT_TRUE(a->awaiting_last && b->awaiting_last);
  EXPECT_EQ(scheduler.completed(decode1, {1, 22}), (std::vector<bool>{true, true}));  // a stops on EOS
  EXPECT_EQ(a->finish_reason, FinishReason::kStop);
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 11, 1}));  // decode2's token dropped
  EXPECT_EQ(a->num_cached, 11);
  EXPECT_TRUE(scheduler.schedule().items.empty());  // nothing left to start: b waits for its last token
  EXPECT_FALSE(scheduler.has_unfinished());  // (b's token is in flight: the engine counts that step)
  EXPECT_EQ(scheduler.completed(decode2, {31, 23}), (std::vector<bool>{false, true}));
  EXPECT_EQ(b->finish_reason, FinishReason::kLength);
  EXPECT_EQ(b->num_generated(), 3);
  EXPECT_EQ(b->tokens.back(), 23);
  EXPECT_EQ(blocks.num_free_blocks(), 16);
}

// ignore_eos (as vLLM's): the model's EOS does not end the sequence, a stop token still does.
TEST(Scheduler, IgnoreEosKeepsGoingUntilAStopTokenOrTheLength) {
  for (const bool ignore_eos : {false, true}) {
    BlockManager blocks(16, 64);
    Fixture f;
    f.request.max_new_tokens = 5;
    f.request.sampling.ignore_eos = ignore_eos;
    f.request.sampling.stop_token_ids = {9};
    Scheduler scheduler({.max_running = 8, .chunk_tokens = 100, .max_model_len = 1000}, blocks, {1});
    Sequence* a = f.add(scheduler, 4);
    scheduler.postprocess(scheduler.schedule(), {1});  // the prefill samples EOS
    EXPECT_EQ(a->finish_reason, ignore_eos ? FinishReason::kNone : FinishReason::kStop) << ignore_eos;
    if (!ignore_eos) continue;
    scheduler.postprocess(scheduler.schedule(), {1});
    EXPECT_EQ(a->finish_reason, FinishReason::kNone);
    scheduler.postprocess(scheduler.schedule(), {9});  // a stop token still stops
    EXPECT_EQ(a->finish_reason, FinishReason::kStop);
  }
}

}  // namespace
}  // namespace deepinfer
