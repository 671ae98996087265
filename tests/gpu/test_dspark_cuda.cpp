// DeepSeek-V4.1's DSpark drafter on the GPU (src/model/cuda/cuda_v41_dspark.cpp, issue #27) against the CPU module
// on tests/fixtures/tiny-v41-dspark with its weights rounded to bf16 (tests/unit/test_dspark.cpp checks the CPU one;
// cpu_reference.h why rounded and why medians): the draft layers' window keys the main steps write, the blocks drafted
// from the same cache; and the drafter through the engine on the GPU, whose outputs must be plain decoding's.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "src/core/device.h"
#include "src/engine/engine.h"
#include "src/model/backend.h"
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

std::vector<CausalLm::DraftBlock> draft(const CausalLm& model, DraftRun& run) {
  ForwardBatch anchors;
  std::vector<SamplingRow> rows;
  for (int64_t s = 0; s < 2; ++s) {
    anchors.token_ids.push_back(run.tokens[s].back());
    anchors.sequences.push_back({std::ssize(run.tokens[s]) - 1, 1, run.tables[s]});
    rows.push_back({0.0f, 1.0f, 0, 77, 0});
  }
  return model.dspark_draft(anchors, *run.cache, rows);
}

// The window keys the main steps write for the draft layers follow the main layers' keys at the target layers
// (whose streams they are computed from): as close to the CPU's as those are, row for row in the median. Features
// taken at the wrong place, or keys at the wrong position, leave every row of order 1 away.
TEST(CudaDspark, DraftKeysFollowTheTargetLayers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const std::unique_ptr<CausalLm> cpu = load(Device::kCpu), gpu = load(Device::kCuda);
  ASSERT_TRUE(gpu->has_mtp());
  ASSERT_EQ(gpu->dspark_block_size(), cpu->dspark_block_size());
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
  const std::vector<CausalLm::DraftBlock> a = draft(*cpu, want), b = draft(*gpu, got);
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

}  // namespace
}  // namespace deepinfer
