// DeepSeek-V4.1's DSpark drafter on the GPU (src/model/v41/cuda/cuda_v41_dspark.cpp, issue #27) against the CPU module
// on tests/fixtures/tiny-v41-dspark with its weights rounded to bf16 (tests/unit/test_dspark.cpp checks the CPU one;
// cpu_reference.h why rounded and why medians): the draft layers' window keys the main steps write, the blocks drafted
// from the same cache; and the drafter through the engine on the GPU, whose outputs must be plain decoding's; drafts
// chained behind their verify step (speculation.cuh's kernels against the engine's rule, the chained draft against the
// in-order one from the same verify step, and through the engine chained = in order). Skipped without a GPU.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>

#include "kernels/cuda/speculation.cuh"
#include "src/core/device.h"
#include "src/core/device_array.h"
#include "src/core/files.h"
#include "src/engine/speculation.h"
#include "src/engine/engine.h"
#include "src/model/backend.h"
#include "src/model/engram_hash.h"
#include "src/model/model_config.h"
#include "tests/gpu/cpu_reference.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

constexpr const char* kFixture = "tiny-v41-dspark";

std::unique_ptr<CausalLm> load(Device device, bool batch_invariant = false) {
  return testing::load_with_drafter(kFixture, device, /*rounded=*/device == Device::kCpu, batch_invariant);
}

// Two sequences through the same steps on a model: prompts in chunks (37 + 20 and 29 tokens), then three decode
// steps, leaving each with all but its last token cached (ready to draft).
struct DraftRun {
  std::unique_ptr<KvCache> cache;
  std::vector<std::vector<int32_t>> tokens, tables;
};
DraftRun run_steps(const CausalLm& model) {
  DraftRun run{model.make_kv_cache(4), {}, {{0, 1}, {2, 3}}};
  for (int64_t s = 0; s < 2; ++s) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < 61; ++i) t.push_back(static_cast<int32_t>(2 + (i * 53 + s * 17) % 240));
    run.tokens.push_back(t);
  }
  // (first row, rows) per sequence and step; 0 rows: not in the step.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> steps = {
      {{0, 37}, {0, 29}}, {{37, 20}, {29, 0}}, {{57, 1}, {29, 1}}, {{58, 1}, {30, 1}}, {{59, 1}, {31, 1}}};
  for (const auto& step : steps) {
    ForwardBatch batch;
    for (int64_t s = 0; s < 2; ++s) {
      const auto [first, rows] = step[s];
      if (rows == 0) continue;
      batch.token_ids.insert(batch.token_ids.end(), run.tokens[s].begin() + first, run.tokens[s].begin() + first + rows);
      batch.sequences.push_back({first, rows, run.tables[s]});
    }
    model.forward(batch, *run.cache);
  }
  run.tokens[0].resize(61);  // 60 cached + its last
  run.tokens[1].resize(33);  // 32 cached + its last
  return run;
}

std::vector<DraftBlock> draft(const CausalLm& model, DraftRun& run) {
  ForwardBatch anchors;
  std::vector<SamplingRow> rows;
  for (int64_t s = 0; s < 2; ++s) {
    anchors.token_ids.push_back(run.tokens[s].back());
    anchors.sequences.push_back({std::ssize(run.tokens[s]) - 1, 1, run.tables[s]});
    rows.push_back({0.0f, 1.0f, 0, 77, 0});
  }
  return model.draft_module()->dspark_draft(anchors, *run.cache, rows);
}

// The window keys the main steps write for the draft layers follow the main layers' keys at the target layers
// (whose streams they are computed from): as close to the CPU's as those are, row for row in the median. Features
// taken at the wrong place, or keys at the wrong position, leave every row of order 1 away.
TEST(CudaDspark, DraftKeysFollowTheTargetLayers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> cpu = load(Device::kCpu), gpu = load(Device::kCuda);
  ASSERT_NE(gpu->draft_module(), nullptr);
  ASSERT_EQ(gpu->draft_module()->block_size(), cpu->draft_module()->block_size());
  DraftRun want = run_steps(*cpu), got = run_steps(*gpu);
  const ModelConfig& c = cpu->config();
  const int64_t L = c.num_hidden_layers, layers = want.cache->num_layers(), dim = want.cache->entry_dim();
  const int64_t hd = c.v41.head_dim;
  ASSERT_EQ(got.cache->num_layers(), layers);
  ASSERT_EQ(layers, L + c.v41.num_nextn_predict_layers);
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t count = std::ssize(want.tokens[s]) - 1;
    std::vector<float> a(layers * count * dim), b(layers * count * dim);
    want.cache->export_entries(want.tables[s], count, a.data());
    got.cache->export_entries(got.tables[s], count, b.data());
    std::vector<double> medians;
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<float> ka, kb;  // the layer's window K = V of every cached row
      for (int64_t p = 0; p < count; ++p) {
        ka.insert(ka.end(), a.begin() + (l * count + p) * dim, a.begin() + (l * count + p) * dim + hd);
        kb.insert(kb.end(), b.begin() + (l * count + p) * dim, b.begin() + (l * count + p) * dim + hd);
      }
      medians.push_back(testing::median_relative_error(kb, ka, hd));
      std::printf("sequence %lld, %s %lld: window keys GPU against CPU, median row %.3e, worst %.3e (%lld rows)\n",
                  static_cast<long long>(s), l < L ? "layer" : "draft layer", static_cast<long long>(l < L ? l : l - L),
                  medians.back(), testing::worst_relative_error(kb, ka, hd), static_cast<long long>(count));
    }
    double targets = 0;
    for (const int64_t t : c.v41.dspark.target_layer_ids) targets = std::max(targets, medians[t]);
    for (int64_t l = L; l < layers; ++l)
      EXPECT_LT(medians[l], 1.5 * targets + 0.03) << "sequence " << s << ", draft layer " << l - L;
  }
}

// The blocks drafted from the same cache (the CPU's entries imported into the GPU's): the draft layers, the head,
// the Markov term and the confidence head alone. The first draft of each block reads nothing drawn before.
TEST(CudaDspark, BlocksMatchTheCpuOnTheSameCache) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> cpu = load(Device::kCpu), gpu = load(Device::kCuda);
  DraftRun want = run_steps(*cpu);
  DraftRun got{gpu->make_kv_cache(4), want.tokens, want.tables};
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t count = std::ssize(want.tokens[s]) - 1;
    std::vector<float> entries(want.cache->num_layers() * count * want.cache->entry_dim());
    want.cache->export_entries(want.tables[s], count, entries.data());
    got.cache->import_entries(got.tables[s], count, entries.data());
  }
  const std::vector<DraftBlock> a = draft(*cpu, want), b = draft(*gpu, got);
  ASSERT_EQ(a.size(), b.size());
  int64_t same = 0, total = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(b[s].tokens.size(), a[s].tokens.size());
    total += std::ssize(a[s].tokens);
    for (size_t k = 0; k < a[s].tokens.size() && a[s].tokens[k] == b[s].tokens[k]; ++k) {
      ++same;
      EXPECT_NEAR(b[s].confidence[k], a[s].confidence[k], 0.05) << "sequence " << s << ", draft " << k;
    }
    EXPECT_EQ(b[s].tokens[0], a[s].tokens[0]) << "sequence " << s;
    std::printf("sequence %zu: CPU drafts", s);
    for (size_t k = 0; k < a[s].tokens.size(); ++k) std::printf(" %d (%.3f)", a[s].tokens[k], a[s].confidence[k]);
    std::printf("; GPU");
    for (size_t k = 0; k < b[s].tokens.size(); ++k) std::printf(" %d (%.3f)", b[s].tokens[k], b[s].confidence[k]);
    std::printf("\n");
  }
  std::printf("%lld of %lld drafts as the CPU's before a block's first difference\n", static_cast<long long>(same),
              static_cast<long long>(total));
}

// Bounded replay's compact form (the kept rows only from v41_first_compact_layer on): the draft layers' keys of the
// kept rows are the mask form's. The fixture's first target layer comes before its compact layer, so the features
// captured there are gathered with the kept rows. Under --batch-invariant, whose rows' bits do not depend on how many
// rows run beside them.
TEST(CudaDspark, CompactReplayWritesTheMaskFormsDraftKeys) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> gpu = load(Device::kCuda, /*batch_invariant=*/true);
  const ModelConfig& c = gpu->config();
  const V41TextConfig& v = c.v41;
  const int64_t L = c.num_hidden_layers, compact_layer = v41_first_compact_layer(v);
  ASSERT_LT(compact_layer, L);
  ASSERT_LT(v.dspark.target_layer_ids.front(), compact_layer) << "the test wants a target layer before compaction";
  const int64_t n = 40, floor = n - (v.sliding_window + kV41BacktrackingTokens), hd = v.head_dim;
  std::vector<int32_t> prompt, blocks = {0, 1};
  for (int64_t i = 0; i < n; ++i) prompt.push_back(static_cast<int32_t>(2 + (i * 29 + 3) % 240));
  std::vector<std::vector<float>> keys;
  for (const bool compact : {false, true}) {
    std::unique_ptr<KvCache> cache = gpu->make_kv_cache(2);
    cache->fill_random(5);
    ForwardBatch batch;
    batch.token_ids = prompt;
    batch.sequences.push_back({0, n, blocks});
    batch.sequences.back().replay_floor = floor;
    batch.compact_replay = compact;
    gpu->forward(batch, *cache);
    const int64_t layers = cache->num_layers(), dim = cache->entry_dim();
    std::vector<float> entries(layers * n * dim), kept;
    cache->export_entries(blocks, n, entries.data());
    for (int64_t l = L; l < layers; ++l)
      for (int64_t p = floor; p < n; ++p)
        kept.insert(kept.end(), entries.begin() + (l * n + p) * dim, entries.begin() + (l * n + p) * dim + hd);
    keys.push_back(kept);
  }
  ASSERT_EQ(keys[0].size(), keys[1].size());
  const double err = testing::worst_relative_error(keys[1], keys[0], hd);
  std::printf("compact against mask form: the draft layers' keys of %lld kept rows, worst row %.3e\n",
              static_cast<long long>(n - floor), err);
  EXPECT_EQ(err, 0.0);
}

// Through the engine: the outputs are plain decoding's, fixed and variable verify lengths, greedy and sampled, and
// a cache so small that sequences are preempted. Under --batch-invariant, whose verify rows carry a one-row step's
// bits.
TEST(CudaDspark, DrafterKeepsThePlainOutputs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> model = load(Device::kCuda, /*batch_invariant=*/true);
  struct Case {
    int64_t drafts;
    bool varlen;
    float temperature;
    int64_t cache_tokens;
  };
  for (const Case& c : {Case{4, false, 0.0f, 16384}, Case{3, false, 0.8f, 16384}, Case{4, true, 0.0f, 16384},
                        Case{4, false, 0.0f, 4 * 64}}) {
    const std::string name = fmt::format("nextn {}{}, temperature {}, cache {}", c.drafts, c.varlen ? " varlen" : "",
                                         c.temperature, c.cache_tokens);
    const SpeculationStats s = testing::expect_model_drafter_keeps_outputs(*model, c.drafts, c.varlen,
                                                                           c.temperature, c.cache_tokens, name);
    EXPECT_GT(s.verified, 0) << name;
    std::printf("%s on the GPU: DSpark drafts %lld drafted, %lld verified, %lld accepted\n", name.c_str(),
                static_cast<long long>(s.drafted), static_cast<long long>(s.verified),
                static_cast<long long>(s.accepted));
  }
}

// The acceptance kernel against the engine's rule (speculation.h's accepted_drafts), for every count of accepted drafts
// and sequences without drafts; the draft rows moved by the counts.
TEST(CudaDspark, AcceptanceKernelsFollowTheEnginesRule) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  std::vector<int32_t> inputs, drawn, first_rows, num_rows, want_accepted, want_anchors;
  for (int64_t s = 0; s < 40; ++s) {
    const int64_t drafts = s % 6, accept = s % 7 <= drafts ? s % 7 : drafts;  // accept drafts, then (if any) a miss
    first_rows.push_back(static_cast<int32_t>(inputs.size()));
    num_rows.push_back(static_cast<int32_t>(drafts + 1));
    DraftProposal proposal;
    inputs.push_back(static_cast<int32_t>(1000 + s));  // the last token
    for (int64_t j = 0; j < drafts; ++j) {
      const auto target = static_cast<int32_t>(100 * s + j);
      proposal.tokens.push_back(j < accept ? target : target + 50);
      inputs.push_back(proposal.tokens.back());
    }
    for (int64_t j = 0; j <= drafts; ++j) drawn.push_back(static_cast<int32_t>(100 * s + j));
    const int64_t a = accepted_drafts(proposal, std::span<const int32_t>(drawn).subspan(first_rows.back(), drafts + 1));
    ASSERT_EQ(a, accept);
    want_accepted.push_back(static_cast<int32_t>(a));
    want_anchors.push_back(drawn[first_rows.back() + a]);
  }
  const auto S = std::ssize(first_rows);
  DeviceArray<int32_t> d_inputs = DeviceArray<int32_t>::from_host(inputs), d_drawn = DeviceArray<int32_t>::from_host(drawn);
  DeviceArray<int32_t> d_first = DeviceArray<int32_t>::from_host(first_rows);
  DeviceArray<int32_t> d_rows = DeviceArray<int32_t>::from_host(num_rows), accepted(S), anchors(S);
  accepted.poison();
  anchors.poison();
  cuda::accept_drafts(d_inputs.data(), d_drawn.data(), d_first.data(), d_rows.data(), S, accepted.data(),
                      anchors.data(), nullptr);
  EXPECT_EQ(accepted.to_host(), want_accepted);
  EXPECT_EQ(anchors.to_host(), want_anchors);

  const int64_t B = 5;
  std::vector<int32_t> positions, inverse, ends, tokens(S * B, 7);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < B; ++i) {
      positions.push_back(static_cast<int32_t>(10 * s + i));
      inverse.push_back(-positions.back());
      ends.push_back(static_cast<int32_t>(10 * s - 1));
    }
  DeviceArray<int32_t> d_positions = DeviceArray<int32_t>::from_host(positions);
  DeviceArray<int32_t> d_inverse = DeviceArray<int32_t>::from_host(inverse), d_ends = DeviceArray<int32_t>::from_host(ends);
  DeviceArray<int32_t> d_tokens = DeviceArray<int32_t>::from_host(tokens);
  cuda::shift_draft_rows(accepted.data(), anchors.data(), S, B, d_positions.data(), d_inverse.data(), d_ends.data(),
                         d_tokens.data(), nullptr);
  for (int64_t t = 0; t < S * B; ++t) {
    const int32_t a = want_accepted[t / B];
    positions[t] += a;
    inverse[t] -= a;
    ends[t] += a;
    if (t % B == 0) tokens[t] = want_anchors[t / B];
  }
  EXPECT_EQ(d_positions.to_host(), positions);
  EXPECT_EQ(d_inverse.to_host(), inverse);
  EXPECT_EQ(d_ends.to_host(), ends);
  EXPECT_EQ(d_tokens.to_host(), tokens);
}

// A verify step whose sequences accept a chosen number of drafts (the target's own continuation, then a wrong token),
// run twice from the same cache: in order (the tokens to the host, acceptance there, dspark_draft from host anchors)
// and chained (start_forward_and_sample, start_chained_draft behind it, acceptance on the device): the same tokens,
// the same blocks bit for bit at the positions acceptance reaches, greedy and sampled drafts; then a verify step whose
// drafts are the chained draft's on the device (ForwardBatch::tokens_from_draft) against the same one given them on
// the host. Under --batch-invariant, so that a verify row samples what a one-token step does.
TEST(CudaDspark, ChainedDraftIsTheInOrderDraft) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> gpu = load(Device::kCuda, /*batch_invariant=*/true);
  const DraftModule& drafter = *gpu->draft_module();
  const DeviceSteps& device = *gpu->device_steps();
  ASSERT_TRUE(drafter.chains_drafts());
  const int64_t B = drafter.block_size(), vocab = gpu->config().vocab_size;
  // The continuation of each sequence, greedy, one token a step.
  DraftRun scout = run_steps(*gpu);
  std::vector<std::vector<int32_t>> next(2);
  for (int64_t step = 0; step < 4; ++step) {
    ForwardBatch batch;
    std::vector<SamplingRow> rows;
    for (int64_t s = 0; s < 2; ++s) {
      const std::vector<int32_t>& t = scout.tokens[s];
      batch.token_ids.push_back(t.back());
      batch.sequences.push_back({std::ssize(t) - 1, 1, scout.tables[s]});
      rows.push_back({0.0f, 1.0f, 0, 5, std::ssize(t)});
    }
    const std::vector<int32_t> drawn = device.forward_and_sample(batch, *scout.cache, nullptr, rows, nullptr, nullptr);
    for (int64_t s = 0; s < 2; ++s) {
      scout.tokens[s].push_back(drawn[s]);
      next[s].push_back(drawn[s]);
    }
  }
  for (const float temperature : {0.0f, 0.9f}) {
    for (const std::array<int64_t, 2> accept : {std::array<int64_t, 2>{0, 3}, std::array<int64_t, 2>{2, 1}}) {
      const std::string name = fmt::format("temperature {}, accepting {} and {}", temperature, accept[0], accept[1]);
      DraftRun in_order = run_steps(*gpu), chained = run_steps(*gpu);
      // Sequence s verifies 3 drafts: accept[s] of its continuation, then a wrong token (none after 3).
      ForwardBatch verify;
      std::vector<SamplingRow> rows, draft_rows;
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t c = std::ssize(in_order.tokens[s]) - 1;
        verify.token_ids.push_back(in_order.tokens[s].back());
        for (int64_t j = 0; j < 3; ++j)
          verify.token_ids.push_back(j < accept[s] ? next[s][j] : static_cast<int32_t>((next[s][j] + 1) % vocab));
        verify.sequences.push_back({c, 4, in_order.tables[s]});
        for (int64_t j = 0; j < 4; ++j) rows.push_back({0.0f, 1.0f, 0, 5, c + 1 + j});
        draft_rows.push_back({temperature, 0.9f, 0, 11 + static_cast<uint64_t>(s), 0});
      }
      verify.all_logits = verify.speculative_verify = true;
      const std::vector<int32_t> want = device.forward_and_sample(verify, *in_order.cache, nullptr, rows, nullptr, nullptr);
      ForwardBatch anchors;
      for (int64_t s = 0; s < 2; ++s) {
        DraftProposal proposal;
        proposal.tokens.assign(verify.token_ids.begin() + 4 * s + 1, verify.token_ids.begin() + 4 * s + 4);
        const int64_t a = accepted_drafts(proposal, std::span<const int32_t>(want).subspan(4 * s, 4));
        EXPECT_EQ(a, accept[s]) << name << ", sequence " << s;
        anchors.token_ids.push_back(want[4 * s + a]);
        anchors.sequences.push_back({verify.sequences[s].num_cached + 1 + a, 1, in_order.tables[s]});
      }
      const std::vector<DraftBlock> want_blocks = drafter.dspark_draft(anchors, *in_order.cache, draft_rows);

      device.start_forward_and_sample(verify, *chained.cache, nullptr, rows, false);
      drafter.start_chained_draft(verify, *chained.cache, draft_rows);
      EXPECT_EQ(device.finish_forward_and_sample(nullptr), want) << name;
      const std::vector<DraftBlock> blocks = drafter.finish_chained_draft();
      ASSERT_EQ(blocks.size(), want_blocks.size()) << name;
      for (size_t s = 0; s < blocks.size(); ++s) {
        EXPECT_EQ(blocks[s].position, anchors.sequences[s].num_cached) << name << ", sequence " << s;
        EXPECT_EQ(blocks[s].tokens, want_blocks[s].tokens) << name << ", sequence " << s;
        EXPECT_EQ(blocks[s].confidence, want_blocks[s].confidence) << name << ", sequence " << s;
      }

      // The next verify step: each sequence's anchor and 2 of its block's drafts, from the host (in order) or from the
      // chained draft still on the device.
      device.start_forward_and_sample(verify, *chained.cache, nullptr, rows, false);  // the same step again, redrafted
      drafter.start_chained_draft(verify, *chained.cache, draft_rows);
      device.finish_forward_and_sample(nullptr);
      ForwardBatch second;
      std::vector<SamplingRow> second_rows;
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t p = anchors.sequences[s].num_cached;
        second.token_ids.push_back(anchors.token_ids[s]);
        second.token_ids.insert(second.token_ids.end(), want_blocks[s].tokens.begin(), want_blocks[s].tokens.begin() + 2);
        second.sequences.push_back({p, 3, in_order.tables[s]});
        for (int64_t j = 0; j < 3; ++j) second_rows.push_back({0.0f, 1.0f, 0, 5, p + 1 + j});
      }
      second.all_logits = second.speculative_verify = true;
      ForwardBatch second_chained = second;
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t k = 0; k < 2; ++k) {
          second_chained.token_ids[3 * s + 1 + k] = 0;
          second_chained.tokens_from_draft.insert(second_chained.tokens_from_draft.end(),
                                                  {static_cast<int32_t>(3 * s + 1 + k), static_cast<int32_t>(k * 2 + s)});
        }
      const std::vector<int32_t> want_second =
          device.forward_and_sample(second, *in_order.cache, nullptr, second_rows, nullptr, nullptr);
      device.start_forward_and_sample(second_chained, *chained.cache, nullptr, second_rows, false);
      drafter.finish_chained_draft();  // (after the step that reads its tokens was queued, as the engine does)
      EXPECT_EQ(device.finish_forward_and_sample(nullptr), want_second) << name << ": the next verify step";
      EXPECT_EQ(B, std::ssize(want_blocks[0].tokens));
    }
  }
}

// Through the engine with overlapped scheduling, each verify step's draft chained behind it
// (speculation_cases.h): plain decoding's outputs and the in-order run's drafts, greedy and sampled, preempting, and
// under the variable-length rule. Under --batch-invariant (plain = speculative).
TEST(CudaDspark, ChainedDraftsGiveTheInOrderRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> model = load(Device::kCuda, /*batch_invariant=*/true);
  const int64_t block = model->draft_module()->block_size();
  testing::expect_chained_drafts_keep_the_outputs(*model, block, false, 0.0f, 16384, "greedy");
  testing::expect_chained_drafts_keep_the_outputs(*model, 3, false, 0.8f, 16384, "sampled");
  testing::expect_chained_drafts_keep_the_outputs(*model, block, false, 0.0f, 4 * 64, "greedy, 4 blocks");
  testing::expect_chained_drafts_keep_the_outputs(*model, block, true, 0.8f, 16384, "varlen, sampled");
}

// With engram layers too (DeepSeek-V4.1-Flash has two, the fixture none): the fixture's configuration with
// tiny-v41-engram's engram settings, dummy weights (draft layers too) and hash tables. A chained verify step's draft
// rows are written on the device, so its engram rows are hashed there (cuda::engram_hash_rows).
TEST(CudaDspark, ChainedDraftsWithEngramLayersGiveTheInOrderRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  nlohmann::json root =
      nlohmann::json::parse(read_text_file(testing::fixture_dir(kFixture) / "config.json", "model config"));
  const nlohmann::json engram =
      nlohmann::json::parse(read_text_file(testing::fixture_dir("tiny-v41-engram") / "config.json", "model config"));
  for (const auto& [key, value] : engram["text_config"].items())
    if (key.starts_with("engram_")) root["text_config"][key] = value;
  ModelConfig config = parse_model_config(root.dump(), "tiny-v41-dspark with tiny-v41-engram's engram layers");
  config.batch_invariant = true;
  ASSERT_EQ(config.v41.engram_layer_ids.size(), 2u);
  dummy_engram_hash(config.v41);
  WeightOrigin weights;
  weights.dummy_seed = 5;
  weights.dummy_draft_module = true;
  const std::unique_ptr<CausalLm> model = make_causal_lm(std::move(config), std::move(weights), Device::kCuda, 0);
  model->draft_module()->enable();
  ASSERT_TRUE(model->draft_module()->chains_drafts());
  testing::expect_chained_drafts_keep_the_outputs(*model, model->draft_module()->block_size(), false, 0.0f, 16384,
                                                  "engram, greedy");
  testing::expect_chained_drafts_keep_the_outputs(*model, 3, false, 0.8f, 16384, "engram, sampled");
}

}  // namespace
}  // namespace deepinfer
