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

TEST(CudaGraphs, ReplayedDecodeStepsEqualEagerOnes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const ModelConfig config = load_model_config(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/tiny.json");
  CudaDeepseekModel graphs(config, DummyWeightSource(3, nullptr), 0);
  CudaDeepseekModel eager(config, DummyWeightSource(3, nullptr), 0);
  eager.set_cuda_graphs(false);
  std::unique_ptr<KvCache> graphs_cache = graphs.make_kv_cache(8), eager_cache = eager.make_kv_cache(8);
  const std::vector<int32_t> table_a = {0, 1}, table_b = {2, 3};  // two sequences, 128 positions each
  const int64_t prompt = 60;
  ForwardBatch prefill;
  for (int64_t i = 0; i < 2 * prompt; ++i) prefill.token_ids.push_back(static_cast<int32_t>((i * 13 + 5) % 500));
  prefill.sequences = {{0, prompt, table_a}, {0, prompt, table_b}};
  ASSERT_EQ(graphs.forward(prefill, *graphs_cache).shape(), eager.forward(prefill, *eager_cache).shape());
  int64_t steps_compared = 0;
  for (int64_t step = 0; step < 10; ++step) {  // positions 60..69 cross the 64-token block boundary
    ForwardBatch decode;
    decode.token_ids = {static_cast<int32_t>(7 * step + 1), static_cast<int32_t>(11 * step + 2)};
    decode.sequences = {{prompt + step, 1, table_a}, {prompt + step, 1, table_b}};
    const Tensor a = graphs.forward(decode, *graphs_cache), b = eager.forward(decode, *eager_cache);
    ASSERT_EQ(a.shape(), b.shape());
    int64_t differing = 0;
    for (int64_t i = 0; i < a.numel(); ++i) differing += a.data<float>()[i] != b.data<float>()[i];
    EXPECT_EQ(differing, 0) << "decode step " << step;
    ++steps_compared;
  }
  EXPECT_EQ(steps_compared, 10);
}

}  // namespace
}  // namespace deepinfer
