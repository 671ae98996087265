// The V4.1 CPU model on its own terms: the in-model quantisers against hand-worked values of the formats, and
// prefix invariance — chunked prefill at several chunk sizes and token-by-token decode equal to one one-shot
// forward, at every position — on tests/fixtures/tiny-v41 (every mechanism: window 8, ratios 0/2/1, three KV
// sources, four index sources, a candidate source, hc_mult 4, index top-k 4) with seeded weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/core/error.h"
#include "src/model/engram_hash.h"
#include "src/model/deepseek/mla_kv_cache.h"
#include "src/model/safetensors.h"
#include "src/model/v41/v41_model.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/fp_formats.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

using testing::worst_relative_error;

TEST(V41Quant, E4m3RoundsToNearestEven) {
  EXPECT_FLOAT_EQ(round_e4m3(0.3f), 0.3125f);        // step 2^-5 in [0.25, 0.5)
  EXPECT_FLOAT_EQ(round_e4m3(1.0625f), 1.0f);        // halfway 1.0 | 1.125: even mantissa
  EXPECT_FLOAT_EQ(round_e4m3(1.1875f), 1.25f);       // halfway 1.125 | 1.25: even mantissa
  EXPECT_FLOAT_EQ(round_e4m3(-448.0f), -448.0f);
  EXPECT_FLOAT_EQ(round_e4m3(std::ldexp(1.0f, -10)), 0.0f);  // half the smallest subnormal 2^-9: to even
  EXPECT_FLOAT_EQ(round_e4m3(std::ldexp(3.0f, -10)), std::ldexp(1.0f, -8));
}

TEST(V41Quant, E2m1TiesAndPowerOfTwoScales) {
  EXPECT_FLOAT_EQ(round_e2m1(0.25f), 0.0f);
  EXPECT_FLOAT_EQ(round_e2m1(0.75f), 1.0f);
  EXPECT_FLOAT_EQ(round_e2m1(1.25f), 1.0f);
  EXPECT_FLOAT_EQ(round_e2m1(1.75f), 2.0f);
  EXPECT_FLOAT_EQ(round_e2m1(2.5f), 2.0f);
  EXPECT_FLOAT_EQ(round_e2m1(3.5f), 4.0f);
  EXPECT_FLOAT_EQ(round_e2m1(5.0f), 4.0f);
  EXPECT_FLOAT_EQ(round_e2m1(-0.8f), -1.0f);
  EXPECT_FLOAT_EQ(pow2_ceil(3.0f), 4.0f);
  EXPECT_FLOAT_EQ(pow2_ceil(4.0f), 4.0f);
  EXPECT_FLOAT_EQ(pow2_ceil(0.3f), 0.5f);
  // A block of 32 with max 6: scale pow2_ceil(6/6) = 1, values snap to the e2m1 grid.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f, x[1] = 2.6f, x[2] = -0.3f;
  cpu::fake_quant_fp4(x.data(), 1, 32, 32, false);
  EXPECT_FLOAT_EQ(x[0], 6.0f);
  EXPECT_FLOAT_EQ(x[1], 3.0f);
  EXPECT_FLOAT_EQ(x[2], -0.5f);
  // FP8: block max 100 -> scale pow2_ceil(100 / 448) = 0.25; the scaled values snap to the e4m3 grid.
  std::vector<float> y(32, 0.0f);
  y[0] = 100.0f, y[1] = 1.01f;
  cpu::fake_quant_fp8(y.data(), 1, 32, 32);
  EXPECT_FLOAT_EQ(y[0], 96.0f);  // 400 is halfway between 384 and 416 (step 32): to the even 384
  EXPECT_FLOAT_EQ(y[1], 1.0f);   // 4.04 -> 4.0 (step 0.5 in [4, 8))
}

class V41Model : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig config = load_model_config(testing::fixture_dir("tiny-v41"));
    WeightStore weights = WeightStore::load(config, testing::fixture_dir("tiny-v41"), LoadFormat::kDummy, 7);
    model_ = std::make_unique<DeepseekV41Model>(std::move(config), std::move(weights));
    prompt_.resize(70);
    for (size_t i = 0; i < prompt_.size(); ++i) prompt_[i] = static_cast<int32_t>((i * 37 + 11) % 256);
    blocks_.resize(4);
    std::iota(blocks_.begin(), blocks_.end(), 0);
  }

  // Logits of every position, the prompt fed in chunks of `chunk` tokens.
  std::vector<float> run_chunked(int64_t chunk) const {
    std::unique_ptr<KvCache> cache = model_->make_kv_cache(4);
    std::vector<float> all;
    for (int64_t start = 0; start < static_cast<int64_t>(prompt_.size()); start += chunk) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(prompt_.size()) - start);
      ForwardBatch batch;
      batch.token_ids.assign(prompt_.begin() + start, prompt_.begin() + start + n);
      batch.sequences.push_back({start, n, blocks_});
      batch.all_logits = true;
      const Tensor logits = model_->forward(batch, *cache);
      all.insert(all.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    }
    return all;
  }

  std::unique_ptr<DeepseekV41Model> model_;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> blocks_;
};


TEST_F(V41Model, ChunkedPrefillAndDecodeEqualOneShot) {
  const std::vector<float> one_shot = run_chunked(static_cast<int64_t>(prompt_.size()));
  ASSERT_EQ(static_cast<int64_t>(one_shot.size()), static_cast<int64_t>(prompt_.size()) * 256);
  for (float v : one_shot) ASSERT_TRUE(std::isfinite(v));
  for (int64_t chunk : {1, 3, 7, 16, 33}) {
    const std::vector<float> chunked = run_chunked(chunk);
    const double err = worst_relative_error(chunked, one_shot, 256);
    EXPECT_LT(err, 1e-5) << "chunks of " << chunk;
    std::printf("[ V4.1     ] chunks of %2lld tokens: worst per-position relative error %.3e vs one-shot\n",
                static_cast<long long>(chunk), err);
  }
}

TEST_F(V41Model, SequencesInOneBatchDoNotMix) {
  // Two sequences stepped together equal each alone (their compressed state and selections are their own).
  std::unique_ptr<KvCache> cache = model_->make_kv_cache(8);
  std::vector<int32_t> other_blocks = {4, 5, 6, 7};
  std::vector<int32_t> other(prompt_.rbegin(), prompt_.rend());
  ForwardBatch batch;
  batch.token_ids = prompt_;
  batch.token_ids.insert(batch.token_ids.end(), other.begin(), other.end());
  batch.sequences.push_back({0, 70, blocks_});
  batch.sequences.push_back({0, 70, other_blocks});
  batch.all_logits = true;
  const Tensor both = model_->forward(batch, *cache);
  const std::vector<float> alone = run_chunked(70);
  const std::vector<float> first(both.data<float>(), both.data<float>() + 70 * 256);
  EXPECT_LT(worst_relative_error(first, alone, 256), 1e-6);
}

// Against the reference (tests/fixtures/make_v41_fixture.py: transformers' deepseek_v41 forward path in fp64):
// the engine's logits at every position within 1e-3 relative error of the reference's last-position logits over
// that prefix, up to the first position where the reference itself moves by more than 1e-3 between fp32 and
// fp64 (a top-k or quantisation boundary decided by rounding: fp32 cannot be held to the fp64 choice there, and
// the token's K=V carries that choice to every later position); and the greedy continuations identical until a
// step whose reference top-1/top-2 margin is below 1e-3.
// Returns the worst relative error where held.
double check_against_transformers(const std::string& fixture) {
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  WeightStore weights = WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
  const DeepseekV41Model model(std::move(config), std::move(weights));
  const nlohmann::json reference = testing::fixture_reference(fixture);
  const SafetensorsFile expected(dir / "reference.safetensors");
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  double worst_held = 0.0, worst_all = 0.0;
  int64_t positions = 0, past_floor = 0;
  for (size_t i = 0; i < reference.at("prompts").size(); ++i) {
    const std::vector<int32_t> prompt = reference["prompts"][i].get<std::vector<int32_t>>();
    const std::vector<double> floor = reference["report"][i].at("fp32_vs_fp64").get<std::vector<double>>();
    const auto n = static_cast<int64_t>(prompt.size());
    bool unstable = false;  // the reference's fp32 left its fp64 choice at or before this position
    std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
    ForwardBatch batch;
    batch.token_ids = prompt;
    batch.sequences.push_back({0, n, blocks});
    batch.all_logits = true;
    const Tensor logits = model.forward(batch, *cache);
    const Tensor want = expected.read(fmt::format("prefix_logits_{}", i));
    EXPECT_EQ(logits.shape(), want.shape());
    if (logits.shape() != want.shape()) return 1.0;
    for (int64_t p = 0; p < n; ++p) {
      const std::vector<float> got(logits.data<float>() + p * V, logits.data<float>() + (p + 1) * V);
      const std::vector<float> ref(want.data<float>() + p * V, want.data<float>() + (p + 1) * V);
      const double err = worst_relative_error(got, ref, V);
      worst_all = std::max(worst_all, err);
      ++positions;
      unstable = unstable || floor[p] > 1e-3;
      if (unstable) {
        ++past_floor;
        continue;
      }
      worst_held = std::max(worst_held, err);
      EXPECT_LT(err, 1e-3) << "prompt " << i << " position " << p << " (reference fp32 vs fp64 there: " << floor[p]
                           << ")";
    }

    // Greedy decode through the cache, one token per step.
    const auto& greedy = reference["greedy"][i];
    const std::vector<int32_t> want_tokens = greedy.at("tokens").get<std::vector<int32_t>>();
    const std::vector<double> margins = greedy.at("margins").get<std::vector<double>>();
    std::vector<int32_t> tokens, sequence = prompt;  // sequence: every token before the step's
    const float* last = logits.data<float>() + (n - 1) * V;
    tokens.push_back(static_cast<int32_t>(std::max_element(last, last + V) - last));
    while (tokens.size() < want_tokens.size()) {
      ForwardBatch step;
      step.token_ids = {tokens.back()};
      step.sequences.push_back({n + static_cast<int64_t>(tokens.size()) - 1, 1, blocks, sequence});
      const Tensor next = model.forward(step, *cache);
      sequence.push_back(tokens.back());
      tokens.push_back(static_cast<int32_t>(std::max_element(next.data<float>(), next.data<float>() + V) -
                                            next.data<float>()));
    }
    for (size_t s = 0; s < want_tokens.size(); ++s) {
      if (tokens[s] == want_tokens[s]) continue;
      const double smallest = *std::min_element(margins.begin(), margins.begin() + static_cast<int64_t>(s) + 1);
      EXPECT_LT(smallest, 1e-3) << "prompt " << i << ": greedy diverges at step " << s << " (" << tokens[s] << " vs "
                                << want_tokens[s] << ") with reference margins >= " << smallest;
      break;
    }
  }
  std::printf("[ V4.1     ] %s, %lld positions: worst relative error %.3e where held to 1e-3, %.3e over all "
              "(%lld positions at or after one where the reference's own fp32 and fp64 differ by > 1e-3)\n",
              fixture.c_str(), static_cast<long long>(positions), worst_held, worst_all,
              static_cast<long long>(past_floor));
  return worst_held;
}

TEST(V41Reference, LogitsAndGreedyMatchTransformers) { check_against_transformers("tiny-v41"); }

// tests/fixtures/tiny-v41-engram: engram at layers 1 and 4 (3 orders x 2 heads, 32-wide rows), its compressed
// vocabulary (142 of 256 ids) from the fixture's own tokenizer through launch/engram_hash.py, the reference
// hashing with transformers' code. The same bound as above, decode included (the hash of a decode token reads
// the tokens before it).
TEST(V41Reference, EngramFixtureMatchesTransformers) { check_against_transformers("tiny-v41-engram"); }

// The engram layers change the outputs (a test of the fixture: without them the logits must move).
TEST(V41Engram, LayersChangeTheLogits) {
  const auto dir = testing::fixture_dir("tiny-v41-engram");
  ModelConfig config = load_model_config(dir);
  ModelConfig without = config;
  without.v41.engram_layer_ids.clear();
  const DeepseekV41Model with_engram(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  const DeepseekV41Model no_engram(without, WeightStore::load(without, dir, LoadFormat::kSafetensors, 0));
  std::vector<int32_t> blocks(2);
  std::iota(blocks.begin(), blocks.end(), 0);
  ForwardBatch batch;
  for (int32_t i = 0; i < 40; ++i) batch.token_ids.push_back((i * 53 + 7) % 256);
  batch.sequences.push_back({0, 40, blocks});
  batch.all_logits = true;
  auto a = with_engram.make_kv_cache(2), b = no_engram.make_kv_cache(2);
  const Tensor x = with_engram.forward(batch, *a), y = no_engram.forward(batch, *b);
  const std::vector<float> xs(x.data<float>(), x.data<float>() + x.numel()), ys(y.data<float>(), y.data<float>() + y.numel());
  EXPECT_GT(worst_relative_error(xs, ys, with_engram.config().vocab_size), 0.1);
}

// Chunked prefill with engram: each chunk's hashes read the tokens before it (earlier_tokens), so every chunk size
// gives the one-shot logits; a chunk without those tokens is refused rather than hashed short.
TEST(V41Engram, ChunkedPrefillEqualsOneShot) {
  const auto dir = testing::fixture_dir("tiny-v41-engram");
  const ModelConfig config = load_model_config(dir);
  const DeepseekV41Model model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  std::vector<int32_t> prompt(50), blocks(2);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 29 + 3) % 256);
  std::iota(blocks.begin(), blocks.end(), 0);
  auto run = [&](int64_t chunk) {
    std::unique_ptr<KvCache> cache = model.make_kv_cache(2);
    std::vector<float> all;
    for (int64_t start = 0; start < static_cast<int64_t>(prompt.size()); start += chunk) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(prompt.size()) - start);
      ForwardBatch batch;
      batch.token_ids.assign(prompt.begin() + start, prompt.begin() + start + n);
      batch.sequences.push_back({start, n, blocks, {prompt.data(), static_cast<size_t>(start)}});
      batch.all_logits = true;
      const Tensor logits = model.forward(batch, *cache);
      all.insert(all.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    }
    return all;
  };
  const std::vector<float> one_shot = run(50);
  for (int64_t chunk : {1, 2, 5, 17}) EXPECT_LT(worst_relative_error(run(chunk), one_shot, 256), 1e-6) << chunk;
  std::unique_ptr<KvCache> cache = model.make_kv_cache(2);
  ForwardBatch first, second;
  first.token_ids.assign(prompt.begin(), prompt.begin() + 10);
  first.sequences.push_back({0, 10, blocks});
  model.forward(first, *cache);
  second.token_ids = {prompt[10]};
  second.sequences.push_back({10, 1, blocks});  // no earlier tokens
  EXPECT_THROW(model.forward(second, *cache), std::exception);
}

TEST(V41Engram, MissingHashTablesAreOneClearError) {
  ModelConfig config = load_model_config(testing::fixture_dir("tiny-v41-engram"));
  config.v41.engram_hash = {};
  WeightStore weights = WeightStore::load(config, testing::fixture_dir("tiny-v41-engram"), LoadFormat::kDummy, 7);
  try {
    DeepseekV41Model model(config, std::move(weights));
    FAIL() << "engram layers ran without their hash tables";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("launch/engram_hash.py"), std::string::npos) << e.what();
  }
}

// The primes the engine computes are the file's (written with sympy by launch/engram_hash.py; read_engram_hash
// refuses a difference), and the buckets of a layer are disjoint and inside its table.
TEST(V41Engram, PrimesAndBucketsFollowTheConfig) {
  const ModelConfig config = load_model_config(testing::fixture_dir("tiny-v41-engram"));
  const EngramHashTables& t = config.v41.engram_hash;
  EXPECT_EQ(t.primes, (std::vector<int64_t>{307, 311, 313, 317, 331, 337, 347, 349, 353, 359, 367, 373}));
  EXPECT_EQ(t.offsets[1], 307);
  EXPECT_EQ(t.offsets[5] + t.primes[5], 307 + 311 + 313 + 317 + 331 + 337);
  EXPECT_EQ(t.offsets[6], 0);  // each layer's table is addressed from its own start
}

// The tiny-v41 fixture's checkpoint, loaded once for the bounded-replay tests.
const DeepseekV41Model& tiny_v41_checkpoint() {
  static const DeepseekV41Model model = [] {
    const auto dir = testing::fixture_dir("tiny-v41");
    ModelConfig config = load_model_config(dir);
    return DeepseekV41Model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  }();
  return model;
}

// Bounded decoder replay, mask mode, on the fixture's checkpoint: the decoder layers' windows (from the first layer
// of ratio 1) see only the prompt's last KEEP = window + 6 tokens. Prompts no longer than KEEP give the exact
// logits bit for bit; longer ones an approximation, reported per prompt (last-position relative error against the
// exact prefill, and whether the greedy token stays). No row of a truncated prompt is exact in general: each
// decoder layer carries the truncation another window further.
TEST(V41Replay, MaskModeIsExactWithinKeepAndReportedBeyond) {
  const DeepseekV41Model& model = tiny_v41_checkpoint();
  const V41TextConfig& v = model.config().v41;
  const int64_t keep = v.sliding_window + kV41BacktrackingTokens, V = model.config().vocab_size;
  ASSERT_LT(v41_first_decoder_layer(v), v.num_hidden_layers) << "the fixture needs decoder layers";
  const nlohmann::json reference = testing::fixture_reference("tiny-v41");
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  int64_t truncated = 0, same_greedy = 0;
  for (size_t i = 0; i < reference.at("prompts").size(); ++i) {
    const std::vector<int32_t> prompt = reference["prompts"][i].get<std::vector<int32_t>>();
    const auto n = static_cast<int64_t>(prompt.size());
    auto run = [&](int64_t floor) {
      std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
      ForwardBatch batch;
      batch.token_ids = prompt;
      batch.sequences.push_back({0, n, blocks});
      batch.sequences.back().replay_floor = floor;
      batch.all_logits = true;
      const Tensor logits = model.forward(batch, *cache);
      return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
    };
    const std::vector<float> exact = run(0), masked = run(std::max<int64_t>(0, n - keep));
    if (n <= keep) {
      EXPECT_EQ(masked, exact) << "prompt " << i << " (" << n << " tokens) is within KEEP";
      continue;
    }
    ++truncated;
    const std::vector<float> last_exact(exact.end() - V, exact.end()), last_masked(masked.end() - V, masked.end());
    const double err = worst_relative_error(last_masked, last_exact, V);
    const bool greedy = std::max_element(last_masked.begin(), last_masked.end()) - last_masked.begin() ==
                        std::max_element(last_exact.begin(), last_exact.end()) - last_exact.begin();
    same_greedy += greedy;
    std::printf("[ V4.1     ] bounded replay (mask, KEEP %lld): prompt %zu of %lld tokens: last-position relative "
                "error %.3e against the exact prefill, greedy token %s\n", static_cast<long long>(keep), i,
                static_cast<long long>(n), err, greedy ? "the same" : "differs");
    EXPECT_TRUE(std::isfinite(err));
    EXPECT_NE(masked, exact) << "prompt " << i << ": a truncated prefill changed nothing";
  }
  std::printf("[ V4.1     ] bounded replay (mask): %lld prompts longer than KEEP, greedy token kept in %lld\n",
              static_cast<long long>(truncated), static_cast<long long>(same_greedy));
  EXPECT_GT(truncated, 0) << "no fixture prompt is longer than KEEP";
}

// SWA replay after a prefix hit whose blocks came without their window state (the store keeps only the block KV):
// the hit's whole blocks are computed, exported, their window values zeroed (as the engine's store writes them) and
// imported into a fresh cache; the prompt then runs from the replay start S with every window floored at S and
// the loaded compressor inputs kept. Replaying the whole hit (S = 0) must give the exact logits bit for bit; a
// replay of the window only is DeepInfer's approximation: its last-position error and greedy token are reported.
TEST(V41Replay, SwaReplayAfterAWindowFreeHit) {
  const DeepseekV41Model& model = tiny_v41_checkpoint();
  const V41TextConfig& v = model.config().v41;
  const int64_t V = model.config().vocab_size, W = v.sliding_window, hd = v.head_dim;
  ASSERT_EQ(model.window_state_values(), hd);
  const nlohmann::json reference = testing::fixture_reference("tiny-v41");
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  int64_t compared = 0, same_greedy = 0;
  for (size_t i = 0; i < reference.at("prompts").size(); ++i) {
    const std::vector<int32_t> prompt = reference["prompts"][i].get<std::vector<int32_t>>();
    const auto n = static_cast<int64_t>(prompt.size());
    const int64_t hit = (n - 1) / KvCache::kBlockSize * KvCache::kBlockSize;
    if (hit < W + 1) continue;
    auto logits_of = [&](KvCache& cache, int64_t cached, int64_t swa_floor, int64_t keep_inputs_below) {
      ForwardBatch batch;
      batch.token_ids.assign(prompt.begin() + cached, prompt.end());
      batch.sequences.push_back({cached, n - cached, blocks, {prompt.data(), static_cast<size_t>(cached)}});
      batch.sequences.back().swa_floor = swa_floor;
      batch.sequences.back().keep_inputs_below = keep_inputs_below;
      const Tensor logits = model.forward(batch, cache);
      return std::vector<float>(logits.data<float>() + logits.numel() - V, logits.data<float>() + logits.numel());
    };
    std::unique_ptr<KvCache> exact_cache = model.make_kv_cache(8);
    const std::vector<float> exact = logits_of(*exact_cache, 0, 0, 0);
    // The hit's blocks as a window-free store would hand them back.
    const std::span<const int32_t> hit_blocks(blocks.data(), static_cast<size_t>(hit / KvCache::kBlockSize));
    std::vector<float> entries(exact_cache->num_layers() * hit * exact_cache->entry_dim());
    exact_cache->export_entries(hit_blocks, hit, entries.data());
    for (size_t e = 0; e < entries.size(); e += exact_cache->entry_dim()) std::fill_n(entries.begin() + e, hd, 0.0f);
    auto replay = [&](int64_t from) {
      std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
      cache->import_entries(hit_blocks, hit, entries.data());
      return logits_of(*cache, from, from, hit);
    };
    EXPECT_EQ(replay(0), exact) << "prompt " << i << ": replaying the whole hit is not the exact prefill";
    const std::vector<float> approx = replay(hit - W);
    const double err = worst_relative_error(approx, exact, V);
    const bool greedy = std::max_element(approx.begin(), approx.end()) - approx.begin() ==
                        std::max_element(exact.begin(), exact.end()) - exact.begin();
    same_greedy += greedy;
    ++compared;
    std::printf("[ V4.1     ] SWA replay of the last %lld of a %lld-token hit (prompt %zu, %lld tokens): last-position "
                "relative error %.3e against the exact prefill, greedy token %s\n", static_cast<long long>(W),
                static_cast<long long>(hit), i, static_cast<long long>(n), err, greedy ? "the same" : "differs");
    EXPECT_TRUE(std::isfinite(err));
    EXPECT_NE(approx, exact) << "prompt " << i << ": replaying the window only changed nothing";
  }
  std::printf("[ V4.1     ] SWA replay: %lld prompts with a hit longer than the window, greedy token kept in %lld\n",
              static_cast<long long>(compared), static_cast<long long>(same_greedy));
  EXPECT_GT(compared, 0) << "no fixture prompt has a whole block before its last token";
}

// The compact form drops the rows below the floor from v41_first_compact_layer on: the logits it gives, and the
// decode steps after it (which read only the kept rows' windows), are the mask form's bit for bit, for a prompt in
// one chunk and in two (the first wholly below the floor: only its last row goes on).
TEST(V41Replay, CompactGivesTheMaskFormsLogitsBitForBit) {
  const DeepseekV41Model& model = tiny_v41_checkpoint();
  const V41TextConfig& v = model.config().v41;
  const int64_t keep = v.sliding_window + kV41BacktrackingTokens;
  ASSERT_LT(v41_first_compact_layer(v), v.num_hidden_layers) << "the fixture needs layers past its last KV source";
  EXPECT_EQ(v41_first_compact_layer(v), 6);  // ratio 1 from 5, which is also a KV source and the candidate source
  const nlohmann::json reference = testing::fixture_reference("tiny-v41");
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  int64_t compared = 0;
  for (size_t i = 0; i < reference.at("prompts").size(); ++i) {
    const std::vector<int32_t> prompt = reference["prompts"][i].get<std::vector<int32_t>>();
    const auto n = static_cast<int64_t>(prompt.size());
    if (n <= keep + 2) continue;
    const int64_t floor = n - keep;
    for (const int64_t first_chunk : {n, floor - 1}) {
      float first_row_entry = 0.0f;  // the compact layer's window entry of position 0: written only by the mask form
      auto run = [&](bool compact) {
        std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
        std::vector<float> out;
        auto step = [&](int64_t cached, std::vector<int32_t> tokens, int64_t replay_floor) {
          ForwardBatch batch;
          const auto count = static_cast<int64_t>(tokens.size());
          batch.token_ids = std::move(tokens);
          batch.sequences.push_back({cached, count, blocks, {prompt.data(), static_cast<size_t>(cached)}});
          batch.sequences.back().replay_floor = replay_floor;
          batch.compact_replay = compact && replay_floor > 0;
          const Tensor logits = model.forward(batch, *cache);
          out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel());
        };
        step(0, {prompt.begin(), prompt.begin() + first_chunk}, floor);
        if (first_chunk < n) step(first_chunk, {prompt.begin() + first_chunk, prompt.end()}, floor);
        step(n, {7}, 0);  // two decode steps on the truncated prefill's cache
        step(n + 1, {9}, 0);
        const auto& host = dynamic_cast<const MlaKvCache&>(*cache);
        first_row_entry = std::fabs(host.layer_entries(v41_first_compact_layer(v))[0]);
        return out;
      };
      const std::vector<float> masked = run(false);
      EXPECT_GT(first_row_entry, 0.0f);
      const std::vector<float> compacted = run(true);
      EXPECT_EQ(first_row_entry, 0.0f) << "compact computed a dropped row";
      ASSERT_EQ(masked.size(), compacted.size());
      EXPECT_EQ(std::memcmp(masked.data(), compacted.data(), masked.size() * sizeof(float)), 0)
          << "prompt " << i << " (" << n << " tokens, first chunk " << first_chunk << ")";
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace deepinfer
