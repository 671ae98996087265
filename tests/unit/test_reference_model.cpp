// The CPU model against transformers: logits of every fixture prompt within 1e-4 relative error, and the
// absorbed (decode) attention path equal to the expanded (prefill) one.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "src/model/deepseek/deepseek_model.h"
#include "src/model/safetensors.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0.0, ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

DeepseekModel load_fixture_model(const std::string& name) {
  const auto dir = testing::fixture_dir(name);
  ModelConfig config = load_model_config(dir);
  WeightStore weights = WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
  return DeepseekModel(std::move(config), std::move(weights));
}

// Identity block table: logical block i -> physical block i.
std::vector<int32_t> identity_blocks(int64_t num_tokens) {
  std::vector<int32_t> blocks((num_tokens + KvCache::kBlockSize - 1) / KvCache::kBlockSize);
  std::iota(blocks.begin(), blocks.end(), 0);
  return blocks;
}

Tensor run_prompt(const DeepseekModel& model, const std::vector<int32_t>& prompt, AttentionPath path) {
  std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
  const std::vector<int32_t> blocks = identity_blocks(static_cast<int64_t>(prompt.size()));
  ForwardBatch batch;
  batch.token_ids = prompt;
  batch.sequences.push_back({0, static_cast<int64_t>(prompt.size()), blocks});
  batch.all_logits = true;
  batch.attention_path = path;
  return model.forward(batch, *cache);
}

class ReferenceModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceModel, LogitsMatchTransformers) {
  const DeepseekModel model = load_fixture_model(GetParam());
  const nlohmann::json reference = testing::fixture_reference(GetParam());
  const SafetensorsFile expected(testing::fixture_dir(GetParam()) / "reference.safetensors");
  const auto& prompts = reference.at("prompts");
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> prompt = prompts[i].get<std::vector<int32_t>>();
    const Tensor logits = run_prompt(model, prompt, AttentionPath::kExpanded);
    const Tensor want = expected.read(fmt::format("logits_{}", i));
    ASSERT_EQ(logits.shape(), want.shape());
    const double err = relative_error(logits.data<float>(), want.data<float>(), want.numel());
    EXPECT_LT(err, 1e-4) << GetParam() << " prompt " << i << " (" << prompt.size() << " tokens)";
  }
}

TEST_P(ReferenceModel, AbsorbedAttentionEqualsExpanded) {
  const DeepseekModel model = load_fixture_model(GetParam());
  const nlohmann::json reference = testing::fixture_reference(GetParam());
  // Token-by-token decode with the absorbed form against the expanded form on the same tokens.
  const std::vector<int32_t> prompt = reference.at("prompts").back().get<std::vector<int32_t>>();
  const int64_t n = static_cast<int64_t>(prompt.size());
  const std::vector<int32_t> blocks = identity_blocks(n);
  std::unique_ptr<KvCache> absorbed_cache = model.make_kv_cache(8);
  std::unique_ptr<KvCache> expanded_cache = model.make_kv_cache(8);
  for (int64_t t = 0; t < n; ++t) {
    ForwardBatch batch;
    batch.token_ids = {prompt[t]};
    batch.sequences.push_back({t, 1, blocks});
    batch.attention_path = AttentionPath::kAbsorbed;
    const Tensor a = model.forward(batch, *absorbed_cache);
    batch.attention_path = AttentionPath::kExpanded;
    const Tensor b = model.forward(batch, *expanded_cache);
    ASSERT_LT(relative_error(a.data<float>(), b.data<float>(), a.numel()), 1e-5) << "position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceModel, ::testing::ValuesIn(testing::all_fixtures()),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace deepinfer
