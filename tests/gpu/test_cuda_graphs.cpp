// Decode steps replayed from a captured CUDA graph against the same steps run eagerly: the same kernels on the
// same data, so the logits must be identical to the bit, step after step (first sighting eager, second captured,
// then replays, across the 64-token boundary where each sequence's second KV block comes into use).
// configs/models/tiny.json with seeded weights generated on the GPU; skipped without a GPU.
#include <gtest/gtest.h>

#include <numeric>

#include "src/core/device.h"
#include "src/model/cuda/cuda_deepseek_model.h"
#include "src/model/model_config.h"

namespace deepinfer {
namespace {

// `sequences` decode rows a step: 2 (the routed experts as matrix-vector kernels) or 24 (96 pairs: the
// permute + grouped-kernel path, whose expert row ranges stay on the device).
void expect_replays_equal_eager(int64_t sequences) {
  const ModelConfig config = load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
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
}

TEST(CudaGraphs, ReplayedDecodeStepsEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_replays_equal_eager(2);
}

TEST(CudaGraphs, ReplayedGroupedExpertStepsEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_replays_equal_eager(24);
}

// A decode rank with no rows in a step still runs the step with its expert-parallel group (2p2d on two GPUs
// once divided by zero choosing the attention splits of an empty batch).
TEST(CudaGraphs, EmptyStepRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const ModelConfig config = load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
  CudaDeepseekModel model(config, DummyWeightSource(3, nullptr), 0);
  std::unique_ptr<KvCache> cache = model.make_kv_cache(2);
  for (int step = 0; step < 3; ++step) {  // eager, captured, replayed
    const Tensor logits = model.forward(ForwardBatch{}, *cache);
    EXPECT_EQ(logits.shape(), (Shape{0, config.vocab_size})) << "step " << step;
  }
}

}  // namespace
}  // namespace deepinfer
