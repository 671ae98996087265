// DeepSeek-V4.1's DSpark drafter on the CPU (src/model/v41/v41_dspark.cpp) and the engine's DSpark drafter
// (src/engine/dspark_drafter.h), on tests/fixtures/tiny-v41-dspark (tiny-v41 with two random draft layers): the draft
// module loads under DeepSeek's checkpoint names; a sequence's drafts depend on its own tokens only — not on how
// its prompt was chunked, not on what else is batched with it, not on rows a verify step wrote and then rejected
// (across window wrap-arounds and block boundaries); through the engine the outputs are those of plain decoding,
// greedy and sampled, fixed and variable verify lengths, including a cache so small that sequences are preempted;
// and with overlapped scheduling, drafts chained behind their verify steps (late_drafts.h) give the in-order run.
#include <gtest/gtest.h>

#include "src/model/backend.h"
#include "src/model/v41/v41_model.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/late_drafts.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

constexpr const char* kFixture = "tiny-v41-dspark";

DeepseekV41Model load(const char* fixture, bool enable) {
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  DeepseekV41Model model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  if (enable) model.draft_module()->enable();
  return model;
}

std::vector<int32_t> prompt_of(int64_t length, int64_t salt) {
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < length; ++t) tokens.push_back(static_cast<int32_t>(2 + (t * 53 + salt * 17) % 240));
  return tokens;
}

// One sequence of the test: its tokens so far and its blocks (4 of 64 tokens, its own range of the cache).
struct Stream {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  int64_t cached = 0;
};

// Runs the sequences' next `counts[i]` tokens in one forward (zero: not in the batch).
void run_step(const CausalLm& model, KvCache& cache, std::vector<Stream*> streams, const std::vector<int64_t>& counts) {
  ForwardBatch batch;
  for (size_t i = 0; i < streams.size(); ++i) {
    if (counts[i] == 0) continue;
    Stream& s = *streams[i];
    batch.token_ids.insert(batch.token_ids.end(), s.tokens.begin() + s.cached, s.tokens.begin() + s.cached + counts[i]);
    batch.sequences.push_back({s.cached, counts[i], s.table, {s.tokens.data(), static_cast<size_t>(s.cached)}});
    s.cached += counts[i];
  }
  model.forward(batch, cache);
}

// Drafts for the sequences (each has all but its last token cached), greedy.
std::vector<DraftBlock> draft(const CausalLm& model, KvCache& cache, const std::vector<const Stream*>& streams,
                                        float temperature = 0.0f) {
  ForwardBatch anchors;
  std::vector<SamplingRow> rows;
  for (const Stream* s : streams) {
    EXPECT_EQ(s->cached, static_cast<int64_t>(s->tokens.size()) - 1);
    anchors.token_ids.push_back(s->tokens.back());
    anchors.sequences.push_back({s->cached, 1, s->table});
    rows.push_back({temperature, 1.0f, 0, 77, 0});
  }
  return model.draft_module()->dspark_draft(anchors, cache, rows);
}

void expect_same(const DraftBlock& a, const DraftBlock& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.confidence.size(), b.confidence.size()) << what;
  for (size_t k = 0; k < a.confidence.size(); ++k) EXPECT_NEAR(a.confidence[k], b.confidence[k], 1e-6) << what;
}

TEST(DsparkModule, LoadsTheDraftLayers) {
  DeepseekV41Model model = load(kFixture, false);
  DraftModule* module = model.draft_module();
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->kind(), DraftModule::Kind::kDspark);
  EXPECT_FALSE(module->enabled());
  EXPECT_EQ(module->block_size(), 4);
  const int64_t layers = model.config().num_hidden_layers;
  EXPECT_EQ(model.make_kv_cache(1)->num_layers(), layers) << "not enabled yet";
  module->enable();
  EXPECT_TRUE(module->enabled());
  EXPECT_EQ(model.make_kv_cache(1)->num_layers(), layers + 2) << "one cache layer per draft layer";
  // Without the draft layers (tiny-v41 has num_nextn_predict_layers 1 but no dspark_* keys nor mtp.* weights).
  DeepseekV41Model plain = load("tiny-v41", false);
  EXPECT_EQ(plain.draft_module(), nullptr);
  EXPECT_THROW(require_draft_module(plain), InputError);
}

// The drafts of a sequence: the same whether its prompt ran in one chunk or in chunks of 7 beside another
// sequence's, and whether it drafts alone or batched with another.
TEST(DsparkModule, DraftsDependOnTheSequenceOnly) {
  const DeepseekV41Model model = load(kFixture, true);
  for (int64_t length : {2, 9, 40, 70, 130}) {
    std::unique_ptr<KvCache> alone = model.make_kv_cache(8), shared = model.make_kv_cache(8);
    Stream a{prompt_of(length, 1), {0, 1, 2, 3}}, b{a.tokens, {4, 5, 6, 7}}, other{prompt_of(50, 2), {0, 1, 2, 3}};
    run_step(model, *alone, {&a}, {length - 1});
    for (int64_t done = 0; done < length - 1;) {  // b in chunks of 7, with the other sequence's chunks of 11
      const int64_t n = std::min<int64_t>(7, length - 1 - done), m = std::min<int64_t>(11, 49 - other.cached);
      run_step(model, *shared, {&b, &other}, {n, m});
      done += n;
    }
    if (other.cached < 49) run_step(model, *shared, {&other}, {49 - other.cached});
    const std::vector<DraftBlock> one = draft(model, *alone, {&a});
    const std::vector<DraftBlock> two = draft(model, *shared, {&other, &b});
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(two.size(), 2u);
    expect_same(one[0], two[1], "prompt of " + std::to_string(length));
    ASSERT_EQ(one[0].tokens.size(), 4u);
    for (double c : one[0].confidence) {
      EXPECT_GT(c, 0.0);
      EXPECT_LT(c, 1.0);
    }
  }
}

// A verify step writes the draft layers' keys for every row it runs; after a rejection the sequence's count falls
// back and its next drafts must not see the rejected rows' keys: they equal the drafts of a run that never wrote
// them. Lengths cross the window (8) many times and the 64-token block boundary.
TEST(DsparkModule, RejectedRowsLeaveNoTrace) {
  const DeepseekV41Model model = load(kFixture, true);
  for (int64_t length : {5, 61, 63, 64, 100}) {
    std::unique_ptr<KvCache> verified = model.make_kv_cache(4), clean = model.make_kv_cache(4);
    Stream v{prompt_of(length, 3), {0, 1, 2, 3}}, c{v.tokens, {0, 1, 2, 3}};
    run_step(model, *verified, {&v}, {length - 1});
    run_step(model, *clean, {&c}, {length - 1});
    // The verify step: the last token and three drafts, of which the first is accepted (the target's token is 9).
    v.tokens.insert(v.tokens.end(), {9, 201, 202});
    run_step(model, *verified, {&v}, {4});
    v.cached -= 2;                      // rows of 201 and 202 rejected: the cache keeps up to the accepted draft
    v.tokens.resize(length + 1);        // ... and the target's token after it follows
    v.tokens.push_back(17);
    c.tokens.insert(c.tokens.end(), {9, 17});
    run_step(model, *clean, {&c}, {2});
    ASSERT_EQ(v.tokens, c.tokens);
    ASSERT_EQ(v.cached, c.cached);
    expect_same(draft(model, *verified, {&v})[0], draft(model, *clean, {&c})[0], "prompt of " + std::to_string(length));
  }
}

// Overlapped scheduling with DSpark: every verify step's draft chained behind it (testing::LateDrafts) gives the
// in-order run (late_drafts.h), greedy and sampled, with preemption, and under the variable-length rule.
TEST(DsparkDrafter, ChainedDraftsGiveTheInOrderRun) {
  DeepseekV41Model model = load(kFixture, true);
  testing::expect_chained_drafts_give_the_in_order_run(model, 4, 0.0f, 16384, "nextn 4, greedy");
  testing::expect_chained_drafts_give_the_in_order_run(model, 3, 0.8f, 16384, "nextn 3, sampled");
  testing::expect_chained_drafts_give_the_in_order_run(model, 4, 0.0f, 4 * 64, "nextn 4, greedy, 4 blocks");
}

// Through the engine (DsparkDrafter): plain decoding's outputs, greedy and sampled, fixed and variable verify
// lengths, and a cache of 4 blocks (verify rows only where blocks fit; preemption drops pending drafts).
TEST(DsparkDrafter, GivesThePlainOutputs) {
  const DeepseekV41Model model = load(kFixture, true);
  struct Case {
    int64_t drafts;
    bool varlen;
    float temperature;
    int64_t cache_tokens;
  };
  for (const Case& c : {Case{4, false, 0.0f, 16384}, Case{3, false, 0.8f, 16384}, Case{4, true, 0.0f, 16384},
                        Case{4, true, 1.0f, 16384}, Case{4, false, 0.0f, 4 * 64}}) {
    const std::string name = fmt::format("nextn {}{}, temperature {}, cache {}", c.drafts, c.varlen ? " varlen" : "",
                                         c.temperature, c.cache_tokens);
    const SpeculationStats s = testing::expect_model_drafter_keeps_outputs(model, c.drafts, c.varlen,
                                                                           c.temperature, c.cache_tokens, name);
    EXPECT_GT(s.drafted, 0) << name;
    EXPECT_GT(s.verified, 0) << name;
    std::printf("%s: DSpark drafts %lld drafted, %lld verified, %lld accepted\n", name.c_str(),
                static_cast<long long>(s.drafted), static_cast<long long>(s.verified),
                static_cast<long long>(s.accepted));
  }
}

}  // namespace
}  // namespace deepinfer
