// A checkpoint read a tensor at a time as the CUDA model uploads it (CheckpointWeightSource, what `--device cuda`
// loads through) builds the same model as the host store it replaces: the logits of a prefill and a decode step bit
// for bit, on V2/V3 (bf16, FP8 with V3's block scales) and V4.1 (FP8 + FP4, engram tables). Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "src/core/device.h"
#include "src/model/backend.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

// The last rows' logits of a 40-token prefill and one decode step.
std::vector<float> logits_of(CausalLm& model) {
  const int64_t vocab = model.config().vocab_size, prompt = 40;
  const std::vector<int32_t> table = {0};
  std::unique_ptr<KvCache> cache = model.make_kv_cache(1);
  ForwardBatch prefill;
  for (int64_t t = 0; t < prompt; ++t) prefill.token_ids.push_back(static_cast<int32_t>(2 + (t * 37 + 5) % (vocab - 2)));
  prefill.sequences.push_back({0, prompt, table});
  const Tensor first = model.forward(prefill, *cache);
  ForwardBatch step;
  step.token_ids = {7};
  step.sequences.push_back({prompt, 1, table});
  step.sequences.back().earlier_tokens = prefill.token_ids;  // as the engine passes them (V4.1's engram hashing)
  const Tensor second = model.forward(step, *cache);
  std::vector<float> out(first.data<float>(), first.data<float>() + first.numel());
  out.insert(out.end(), second.data<float>(), second.data<float>() + second.numel());
  return out;
}

TEST(CudaCheckpointSource, BuildsTheModelTheHostStoreBuilds) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (const char* fixture : {"tiny-v2-bf16", "tiny-v3-fp8", "tiny-v41-fp8", "tiny-v41-engram-fp8"}) {
    const auto dir = testing::fixture_dir(fixture);
    const ModelConfig config = load_model_config(dir);
    WeightOrigin host, streamed;
    host.host = std::make_unique<WeightStore>(WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
    streamed.checkpoint = std::make_unique<CheckpointTensors>(config, dir);
    const std::unique_ptr<CausalLm> a = make_causal_lm(config, std::move(host), Device::kCuda, 0);
    const std::unique_ptr<CausalLm> b = make_causal_lm(config, std::move(streamed), Device::kCuda, 0);
    const std::vector<float> x = logits_of(*a), y = logits_of(*b);
    ASSERT_EQ(x.size(), y.size()) << fixture;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << fixture;
  }
}

}  // namespace
}  // namespace deepinfer
