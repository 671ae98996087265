// Decode steps replayed from a captured CUDA graph against the same steps run eagerly: the same kernels on the
// same data, so the logits must be identical to the bit, step after step (first sighting eager, second captured,
// then replays, across the 64-token boundary where each sequence's second KV block comes into use).
// configs/models/tiny.json (also widened to V3's FP8 tiles and 64 heads) and the V4.1 fixtures' configurations with
// seeded weights generated on the GPU; skipped without a GPU.
#include <gtest/gtest.h>

#include <numeric>

#include "src/core/device.h"
#include "src/model/deepseek/cuda/cuda_deepseek_model.h"
#include "src/model/v41/cuda/cuda_v41_model.h"
#include "src/model/model_config.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

ModelConfig tiny_config() {
  return load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
}

// `sequences` decode rows a step: 2 (the routed experts as matrix-vector kernels) or 24 (96 pairs: the
// permute + grouped-kernel path, whose expert row ranges stay on the device).
void expect_replays_equal_eager(const ModelConfig& config, int64_t sequences) {
  CudaDeepseekModel graphs(config, DummyWeightSource(3, nullptr), 0);
  CudaDeepseekModel eager(config, DummyWeightSource(3, nullptr), 0);
  eager.set_cuda_graphs(false);
  std::unique_ptr<KvCache> graphs_cache = graphs.make_kv_cache(2 * sequences);
  std::unique_ptr<KvCache> eager_cache = eager.make_kv_cache(2 * sequences);
  const int64_t prompt = 60;  // 128 positions a sequence: blocks 2s and 2s + 1
  std::vector<std::vector<int32_t>> tables;  // the batches' block tables are spans into these
  for (int64_t s = 0; s < sequences; ++s) tables.push_back({static_cast<int32_t>(2 * s), static_cast<int32_t>(2 * s + 1)});
  ForwardBatch prefill;
  for (int64_t i = 0; i < sequences * prompt; ++i) prefill.token_ids.push_back(static_cast<int32_t>((i * 13 + 5) % 500));
  for (int64_t s = 0; s < sequences; ++s) prefill.sequences.push_back({0, prompt, tables[s]});
  ASSERT_EQ(graphs.forward(prefill, *graphs_cache).shape(), eager.forward(prefill, *eager_cache).shape());
  int64_t steps_compared = 0;
  for (int64_t step = 0; step < 10; ++step) {  // positions 60..69 cross the 64-token block boundary
    ForwardBatch decode;
    for (int64_t s = 0; s < sequences; ++s) {
      decode.token_ids.push_back(static_cast<int32_t>((7 * step + 11 * s + 1) % 500));
      decode.sequences.push_back({prompt + step, 1, tables[s]});
    }
    const Tensor a = graphs.forward(decode, *graphs_cache), b = eager.forward(decode, *eager_cache);
    ASSERT_EQ(a.shape(), b.shape());
    int64_t differing = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differing += a.data<float>()[i] != b.data<float>()[i];
    EXPECT_EQ(differing, 0) << sequences << " sequences, decode step " << step;
    ++steps_compared;
  }
  EXPECT_EQ(steps_compared, 10);
  // Every step but the first and the one where the decode attention's KV split count changes (a new shape, run
  // eagerly once, then replayed: 2026-12-01, one H200).
  EXPECT_GE(graphs.graph_replays(), 8);
  EXPECT_EQ(eager.graph_replays(), 0);
}

// V4.1: sequences of 3 to 3 + 29 (n - 1) tokens decoded 12 steps. Their compressed entries grow (the shortest
// has none at first: a sequence gains its first entries and keys inside a captured graph), one crosses a KV
// block, and every step keeps the same key (block tables of 3 blocks). With 12 sequences the FP8 projections
// run dequantised through the tensor-core Linear and the experts take more pairs.
void expect_v41_replays_equal_eager(const std::string& fixture, int64_t sequences) {
  const ModelConfig config = load_model_config(testing::fixture_dir(fixture));
  CudaV41Model graphs(config, DummyWeightSource(5, nullptr), 0);
  CudaV41Model eager(config, DummyWeightSource(5, nullptr), 0);
  eager.set_cuda_graphs(false);
  constexpr int64_t kTableBlocks = 3, kSteps = 12;
  std::unique_ptr<KvCache> graphs_cache = graphs.make_kv_cache(kTableBlocks * sequences);
  std::unique_ptr<KvCache> eager_cache = eager.make_kv_cache(kTableBlocks * sequences);
  std::vector<std::vector<int32_t>> tables(sequences), tokens(sequences);
  ForwardBatch prefill;
  for (int64_t s = 0; s < sequences; ++s) {
    for (int64_t b = 0; b < kTableBlocks; ++b) tables[s].push_back(static_cast<int32_t>(kTableBlocks * s + b));
    const int64_t length = 3 + 29 * (s % 3);
    for (int64_t i = 0; i < length; ++i)
      tokens[s].push_back(static_cast<int32_t>((i * 13 + 7 * s + 5) % config.vocab_size));
    prefill.token_ids.insert(prefill.token_ids.end(), tokens[s].begin(), tokens[s].end());
    prefill.sequences.push_back({0, length, tables[s]});
  }
  ASSERT_EQ(graphs.forward(prefill, *graphs_cache).shape(), eager.forward(prefill, *eager_cache).shape());
  for (int64_t step = 0; step < kSteps; ++step) {
    ForwardBatch decode;
    for (int64_t s = 0; s < sequences; ++s) {
      const auto cached = static_cast<int64_t>(tokens[s].size());
      decode.token_ids.push_back(static_cast<int32_t>((7 * step + 11 * s + 1) % config.vocab_size));
      decode.sequences.push_back({cached, 1, tables[s], {tokens[s].data(), tokens[s].size()}});
    }
    const Tensor a = graphs.forward(decode, *graphs_cache), b = eager.forward(decode, *eager_cache);
    ASSERT_EQ(a.shape(), b.shape());
    int64_t differing = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differing += a.data<float>()[i] != b.data<float>()[i];
    EXPECT_EQ(differing, 0) << fixture << ", " << sequences << " sequences, decode step " << step;
    for (int64_t s = 0; s < sequences; ++s) tokens[s].push_back(decode.token_ids[s]);
  }
  EXPECT_EQ(graphs.graph_replays(), kSteps - 1);  // every step but the first
  EXPECT_EQ(eager.graph_replays(), 0);
}

TEST(CudaGraphs, V41ReplayedDecodeStepsEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_v41_replays_equal_eager("tiny-v41-fp8", 3);
  expect_v41_replays_equal_eager("tiny-v41-fp8", 12);
  expect_v41_replays_equal_eager("tiny-v41-fp8", 40);  // 80 expert pairs
  expect_v41_replays_equal_eager("tiny-v41", 3);
}

TEST(CudaGraphs, V41EngramDecodeStepsReplayEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_v41_replays_equal_eager("tiny-v41-engram", 3);
}

TEST(CudaGraphs, ReplayedDecodeStepsEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_replays_equal_eager(tiny_config(), 2);
}

TEST(CudaGraphs, ReplayedGroupedExpertStepsEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_replays_equal_eager(tiny_config(), 24);
}

// V3's shapes where they pick other kernels: 64 heads (the warpgroup-MMA decode attention), FP8 weights in 128 x 128
// tiles (the FP8 GEMM from 65 rows: 80 rows a step, CUTLASS's launch inside the capture), every layer dense.
TEST(CudaGraphs, V3Fp8TilesAndWideHeadsReplayEqualEager) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  nlohmann::json j = testing::v3_fp8_tiles_json();
  j["num_attention_heads"] = 64;
  j["num_key_value_heads"] = 64;
  j["first_k_dense_replace"] = j["num_hidden_layers"];
  expect_replays_equal_eager(parse_model_config(j.dump(), "tiny.json, V3's FP8 tiles and 64 heads"), 80);
}

// A decode rank with no rows in a step still runs the step with its expert-parallel group (2p2d on two GPUs
// once divided by zero choosing the attention splits of an empty batch).
TEST(CudaGraphs, EmptyStepRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const ModelConfig config = tiny_config();
  CudaDeepseekModel model(config, DummyWeightSource(3, nullptr), 0);
  std::unique_ptr<KvCache> cache = model.make_kv_cache(2);
  for (int step = 0; step < 3; ++step) {  // eager, captured, replayed
    const Tensor logits = model.forward(ForwardBatch{}, *cache);
    EXPECT_EQ(logits.shape(), (Shape{0, config.vocab_size})) << "step " << step;
  }
}

}  // namespace
}  // namespace deepinfer
