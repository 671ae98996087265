// DeepSeek-V4.1's DSpark drafter on the CPU (src/model/v41_dspark.cpp) and the engine's DSpark drafter
// (src/engine/dspark_drafter.h), on tests/fixtures/tiny-v41-dspark (tiny-v41 with two random draft layers): the draft
// module loads under DeepSeek's checkpoint names; a sequence's drafts depend on its own tokens only — not on how
// its prompt was chunked, not on what else is batched with it, not on rows a verify step wrote and then rejected
// (across window wrap-arounds and block boundaries); through the engine the outputs are those of plain decoding,
// greedy and sampled, fixed and variable verify lengths, including a cache so small that sequences are preempted;
// and with overlapped scheduling, drafts chained behind their verify steps (LateDrafts) give the in-order run.
#include <gtest/gtest.h>

#include "kernels/cpu/sampling.h"
#include "src/core/random.h"
#include "src/model/backend.h"
#include "src/model/v41_model.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

constexpr const char* kFixture = "tiny-v41-dspark";

DeepseekV41Model load(const char* fixture, bool enable) {
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  DeepseekV41Model model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  if (enable) model.enable_mtp();
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
std::vector<CausalLm::DraftBlock> draft(const CausalLm& model, KvCache& cache, const std::vector<const Stream*>& streams,
                                        float temperature = 0.0f) {
  ForwardBatch anchors;
  std::vector<SamplingRow> rows;
  for (const Stream* s : streams) {
    EXPECT_EQ(s->cached, static_cast<int64_t>(s->tokens.size()) - 1);
    anchors.token_ids.push_back(s->tokens.back());
    anchors.sequences.push_back({s->cached, 1, s->table});
    rows.push_back({temperature, 1.0f, 0, 77, 0});
  }
  return model.dspark_draft(anchors, cache, rows);
}

void expect_same(const CausalLm::DraftBlock& a, const CausalLm::DraftBlock& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.confidence.size(), b.confidence.size()) << what;
  for (size_t k = 0; k < a.confidence.size(); ++k) EXPECT_NEAR(a.confidence[k], b.confidence[k], 1e-6) << what;
}

TEST(DsparkModule, LoadsTheDraftLayers) {
  DeepseekV41Model model = load(kFixture, false);
  ASSERT_TRUE(model.has_mtp());
  EXPECT_EQ(model.dspark_block_size(), 0) << "not enabled yet";
  const int64_t layers = model.config().num_hidden_layers;
  EXPECT_EQ(model.make_kv_cache(1)->num_layers(), layers);
  model.enable_mtp();
  EXPECT_EQ(model.dspark_block_size(), 4);
  EXPECT_EQ(model.make_kv_cache(1)->num_layers(), layers + 2) << "one cache layer per draft layer";
  // Without the draft layers (tiny-v41 has num_nextn_predict_layers 1 but no dspark_* keys nor mtp.* weights).
  DeepseekV41Model plain = load("tiny-v41", false);
  EXPECT_FALSE(plain.has_mtp());
  EXPECT_THROW(plain.enable_mtp(), InputError);
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
    const std::vector<CausalLm::DraftBlock> one = draft(model, *alone, {&a});
    const std::vector<CausalLm::DraftBlock> two = draft(model, *shared, {&other, &b});
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

// A backend that chains DSpark drafts behind their verify steps, as the CUDA V4.1 model does (CausalLm::chains_drafts),
// over the CPU model: a started verify step runs at once, but its tokens reach the engine only at
// finish_forward_and_sample; its draft rows named by ForwardBatch::tokens_from_draft take the started draft's tokens;
// the draft started after it is anchored where the step's own acceptance puts each sequence (found here from the
// step's inputs and draws, as the device finds it), and its blocks reach the engine only at finish_dspark_draft. So
// the engine's bookkeeping of chained drafts runs on the CPU. The fixture's random draft layers are almost never
// right, so with `references` (each request's prompt and plain outputs) a block's drafts are made the right tokens
// where a hash of their position says so (3 in 4), in every draft, chained or not: acceptance then reaches every
// length and the anchors move by it.
class LateDrafts final : public CausalLm {
 public:
  LateDrafts(CausalLm& inner, const std::vector<std::vector<int32_t>>& references)
      : inner_(inner), references_(references) {}
  const ModelConfig& config() const override { return inner_.config(); }
  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override { return inner_.make_kv_cache(num_blocks); }
  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts) const override {
    return inner_.forward(batch, cache, experts);
  }
  ExpertStore& experts() override { return inner_.experts(); }
  const ExpertStore& experts() const override { return inner_.experts(); }
  size_t kv_cache_bytes_per_token() const override { return inner_.kv_cache_bytes_per_token(); }
  bool has_mtp() const override { return inner_.has_mtp(); }
  int64_t dspark_block_size() const override { return inner_.dspark_block_size(); }
  std::vector<DraftBlock> dspark_draft(const ForwardBatch& anchors, KvCache& cache,
                                       std::span<const SamplingRow> rows) const override {
    EXPECT_FALSE(draft_started_) << "an in-order draft while a chained one is in flight";
    std::vector<DraftBlock> blocks = inner_.dspark_draft(anchors, cache, rows);
    for (size_t s = 0; s < blocks.size(); ++s) {
      std::vector<int32_t> history(anchors.sequences[s].earlier_tokens.begin(), anchors.sequences[s].earlier_tokens.end());
      history.push_back(anchors.token_ids[s]);
      make_right(history, blocks[s]);
    }
    return blocks;
  }
  bool samples_on_device() const override { return true; }
  bool samples_async() const override { return true; }
  bool chains_drafts() const override { return true; }
  std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                          std::span<const SamplingRow> rows, const TokenMasks* masks,
                                          uint64_t*) const override {
    EXPECT_TRUE(masks == nullptr || masks->empty());
    EXPECT_TRUE(batch.tokens_from_draft.empty()) << "an in-order step names a draft's tokens";
    return sample(inner_.forward(batch, cache, experts), rows);
  }
  void start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                std::span<const SamplingRow> rows, bool) const override {
    EXPECT_FALSE(step_started_) << "the engine finishes a verify step before it starts the next";
    ForwardBatch filled = batch;
    const std::vector<int32_t>& owed = batch.tokens_from_draft;
    for (size_t i = 0; i < owed.size(); i += 2) {
      EXPECT_EQ(batch.token_ids[owed[i]], 0) << "a draft input not left at 0";
      EXPECT_TRUE(draft_started_) << "a step names the tokens of no draft in flight";
      filled.token_ids[owed[i]] = draft_tokens_.at(owed[i + 1]);
    }
    linked_drafts_ += static_cast<int64_t>(owed.size() / 2);
    step_tokens_ = sample(inner_.forward(filled, cache, experts), rows);
    step_started_ = true;
    anchors_ = ForwardBatch{};
    accepted_ = batch.speculative_verify;
    if (!accepted_) return;
    int64_t first = 0;  // each sequence's acceptance, as the device finds it: from the step's inputs and draws
    histories_.clear();
    for (const SequenceChunk& seq : batch.sequences) {
      int64_t a = 0;
      while (a < seq.num_new - 1 && step_tokens_[first + a] == filled.token_ids[first + a + 1]) ++a;
      anchors_.token_ids.push_back(step_tokens_[first + a]);
      SequenceChunk anchor{seq.num_cached + 1 + a, 1, seq.block_table};
      anchor.swa_floor = seq.swa_floor;
      anchors_.sequences.push_back(anchor);
      histories_.emplace_back(seq.earlier_tokens.begin(), seq.earlier_tokens.end());
      histories_.back().insert(histories_.back().end(), filled.token_ids.begin() + first,
                               filled.token_ids.begin() + first + a + 1);
      histories_.back().push_back(anchors_.token_ids.back());
      first += seq.num_new;
    }
  }
  std::vector<int32_t> finish_forward_and_sample(uint64_t*) const override {
    EXPECT_TRUE(step_started_);
    step_started_ = false;
    return step_tokens_;
  }
  void start_dspark_draft(const ForwardBatch& verify, KvCache& cache, std::span<const SamplingRow> rows) const override {
    EXPECT_FALSE(draft_started_) << "a chained draft started before the last one finished";
    EXPECT_TRUE(accepted_ && verify.sequences.size() == anchors_.sequences.size()) << "a draft after no verify step";
    accepted_ = false;
    blocks_ = inner_.dspark_draft(anchors_, cache, rows);
    for (size_t s = 0; s < blocks_.size(); ++s) make_right(histories_[s], blocks_[s]);
    const auto S = static_cast<int64_t>(blocks_.size()), B = dspark_block_size();
    draft_tokens_.assign(S * B, -1);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < B; ++k) draft_tokens_[k * S + s] = blocks_[s].tokens[k];
    draft_started_ = true;
    ++chained_drafts_;
  }
  std::vector<DraftBlock> finish_dspark_draft() const override {
    EXPECT_TRUE(draft_started_);
    draft_started_ = false;
    return blocks_;
  }
  int64_t chained_drafts() const { return chained_drafts_; }
  int64_t linked_drafts() const { return linked_drafts_; }

 private:
  // history: a sequence's tokens up to its anchor (position size - 1); the block's drafts follow it.
  void make_right(const std::vector<int32_t>& history, DraftBlock& block) const {
    EXPECT_EQ(block.position + 1, static_cast<int64_t>(history.size())) << "a block not anchored at its last token";
    for (const std::vector<int32_t>& reference : references_) {
      if (reference.size() < history.size() || !std::equal(history.begin(), history.end(), reference.begin())) continue;
      for (size_t k = 0; k < block.tokens.size() && history.size() + k < reference.size(); ++k)
        if (splitmix64(history.size() * 31 + k) % 4 != 0) block.tokens[k] = reference[history.size() + k];
      return;
    }
  }
  std::vector<int32_t> sample(const Tensor& logits, std::span<const SamplingRow> rows) const {
    std::vector<int32_t> tokens(rows.size());
    cpu::sample_rows(logits.data<float>(), logits.size(0), config().vocab_size, rows.data(), tokens.data());
    return tokens;
  }

  CausalLm& inner_;
  const std::vector<std::vector<int32_t>>& references_;
  mutable std::vector<std::vector<int32_t>> histories_;  // the started draft's, per block
  mutable std::vector<int32_t> step_tokens_, draft_tokens_;
  mutable ForwardBatch anchors_;
  mutable std::vector<DraftBlock> blocks_;
  mutable bool step_started_ = false, accepted_ = false, draft_started_ = false;
  mutable int64_t chained_drafts_ = 0, linked_drafts_ = 0;
};

// Overlapped scheduling with DSpark at a fixed length: every verify step's draft chained behind it (LateDrafts) gives
// the in-order run: plain decoding's outputs and the same drafts (drafted, verified and accepted counts), greedy and
// sampled, and with a cache of 4 blocks (preemption while a draft is in flight); and under the variable-length rule
// (drafts chained, each step laid out after its draft is back) plain decoding's outputs.
TEST(DsparkDrafter, ChainedDraftsGiveTheInOrderRun) {
  DeepseekV41Model model = load(kFixture, true);
  struct Case {
    int64_t drafts;
    float temperature;
    int64_t cache_tokens;
  };
  for (const Case& c : {Case{4, 0.0f, 16384}, Case{3, 0.8f, 16384}, Case{4, 0.0f, 4 * 64}}) {
    const std::string name = fmt::format("nextn {}, temperature {}, cache {}", c.drafts, c.temperature, c.cache_tokens);
    const std::vector<Request> requests = testing::speculation_requests(model.config().vocab_size, c.temperature);
    std::vector<std::vector<int32_t>> references;
    const LateDrafts late(model, references);
    const auto run = [&](const CausalLm& backend, int64_t drafts, bool overlap, bool varlen) {
      EngineOptions options;
      options.kv_cache_tokens = c.cache_tokens;
      options.speculation.num_drafts = drafts;
      options.speculation.variable_length = varlen;
      options.speculation.cost_warmup_steps = 2 * (drafts + 1);
      options.speculation.model_drafter = drafts > 0;
      options.overlap_schedule = overlap;
      Engine engine(backend, options);
      EXPECT_EQ(engine.overlaps_steps(), overlap) << name;
      for (const Request& r : requests) engine.add_request(r);
      engine.run_to_completion();
      return std::tuple(engine.results(), engine.stats(), engine.num_preemptions());
    };
    const auto [plain, plain_stats, plain_preemptions] = run(model, 0, false, false);
    for (size_t i = 0; i < plain.size(); ++i) {
      references.push_back(requests[i].prompt_token_ids);
      references.back().insert(references.back().end(), plain[i].output_token_ids.begin(),
                               plain[i].output_token_ids.end());
    }
    const int64_t chained_before = late.chained_drafts(), linked_before = late.linked_drafts();
    const auto [in_order, in_order_stats, in_order_preemptions] = run(late, c.drafts, false, false);
    EXPECT_EQ(late.chained_drafts(), chained_before) << name;
    const auto [chained, chained_stats, preemptions] = run(late, c.drafts, true, false);
    EXPECT_EQ(preemptions, in_order_preemptions) << name;
    if (c.cache_tokens < 1024) {
      EXPECT_GT(preemptions, 0) << name;
    }
    EXPECT_GT(late.chained_drafts(), chained_before) << name << ": no draft was chained";
    EXPECT_GT(late.linked_drafts(), linked_before) << name << ": no verify step took its drafts from a draft in flight";
    ASSERT_EQ(chained.size(), plain.size()) << name;
    ASSERT_EQ(in_order.size(), plain.size()) << name;
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(in_order[i].output_token_ids, plain[i].output_token_ids) << name << ", request " << i;
      EXPECT_EQ(chained[i].output_token_ids, plain[i].output_token_ids) << name << ", request " << i;
      EXPECT_EQ(chained[i].finish_reason, plain[i].finish_reason) << name << ", request " << i;
    }
    const SpeculationStats &a = chained_stats.speculation, &b = in_order_stats.speculation;
    EXPECT_EQ(a.drafted, b.drafted) << name;
    EXPECT_EQ(a.verified, b.verified) << name;
    EXPECT_EQ(a.accepted, b.accepted) << name;
    EXPECT_EQ(a.accepted_by_position, b.accepted_by_position) << name;
    EXPECT_EQ(a.calibration_error(), b.calibration_error()) << name;
    EXPECT_EQ(chained_stats.num_steps, in_order_stats.num_steps) << name;
    EXPECT_GT(a.accepted, a.verified / 4) << name << ": drafts accepted too rarely to move the anchors";
    std::printf("%s: %lld drafted, %lld verified, %lld accepted, %lld steps (plain %lld)\n", name.c_str(),
                static_cast<long long>(a.drafted), static_cast<long long>(a.verified),
                static_cast<long long>(a.accepted), static_cast<long long>(chained_stats.num_steps),
                static_cast<long long>(plain_stats.num_steps));
    // The variable-length rule: drafts chained, the next step laid out once the draft is back (its lengths follow
    // the measured step times, so only the outputs are compared).
    const int64_t chained_now = late.chained_drafts(), linked_now = late.linked_drafts();
    const auto [varlen, varlen_stats, varlen_preemptions] = run(late, c.drafts, true, true);
    EXPECT_GT(late.chained_drafts(), chained_now) << name << " varlen";
    EXPECT_EQ(late.linked_drafts(), linked_now) << name << " varlen: the drafts are on the host when a step is laid out";
    EXPECT_GT(varlen_stats.speculation.verified, 0) << name << " varlen";
    for (size_t i = 0; i < varlen.size() && i < plain.size(); ++i)
      EXPECT_EQ(varlen[i].output_token_ids, plain[i].output_token_ids) << name << " varlen, request " << i;
  }
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
