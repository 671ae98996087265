// DeepSeek-V3's MTP module on the CPU (src/model/deepseek/mtp.cpp) and the engine's MTP drafter (src/engine/mtp_drafter.h):
// the module's logits against transformers' decoder layer holding its weights (tests/fixtures/make_mtp_reference.py),
// chunked = one-shot, and through the engine the outputs of plain decoding, greedy and sampled.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "src/model/backend.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/model/safetensors.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/late_drafts.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

DeepseekModel load_with_mtp(const std::string& fixture) {
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  DeepseekModel model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  model.draft_module()->enable();
  return model;
}


// The main model over `tokens` in chunks of `chunk`, each chunk's hidden states fed to the MTP module with the
// tokens after them; returns the module's logits of every position.
std::vector<float> run_mtp(const DeepseekModel& model, const std::vector<int32_t>& tokens,
                           const std::vector<int32_t>& next_tokens, int64_t chunk) {
  const auto n = static_cast<int64_t>(tokens.size());
  std::unique_ptr<KvCache> cache = model.make_kv_cache(4);
  EXPECT_EQ(cache->num_layers(), model.config().num_hidden_layers + 1);
  const std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<float> out;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    ForwardBatch main;
    main.token_ids.assign(tokens.begin() + start, tokens.begin() + start + len);
    main.sequences.push_back({start, len, table});
    model.forward(main, *cache);  // keeps its rows' hidden states for the module
    std::vector<int64_t> hidden_rows(len);
    std::iota(hidden_rows.begin(), hidden_rows.end(), 0);
    ForwardBatch mtp;
    mtp.token_ids.assign(next_tokens.begin() + start, next_tokens.begin() + start + len);
    mtp.sequences.push_back({start, len, table});
    mtp.all_logits = true;
    const Tensor logits = model.draft_module()->mtp_forward(mtp, hidden_rows, *cache);
    out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel());
  }
  return out;
}

class MtpModule : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpModule, EqualsTransformersDecoderLayer) {
  const DeepseekModel model = load_with_mtp(GetParam());
  ASSERT_NE(model.draft_module(), nullptr);
  EXPECT_EQ(model.draft_module()->kind(), DraftModule::Kind::kMtp);
  const SafetensorsFile expected(testing::fixture_dir(GetParam()) / "reference_mtp.safetensors");
  const Tensor tokens = expected.read("tokens"), next = expected.read("next_tokens"), want = expected.read("logits");
  const std::vector<int32_t> t(tokens.data<int32_t>(), tokens.data<int32_t>() + tokens.numel());
  const std::vector<int32_t> n(next.data<int32_t>(), next.data<int32_t>() + next.numel());
  const std::vector<float> logits = run_mtp(model, t, n, static_cast<int64_t>(t.size()));
  ASSERT_EQ(static_cast<int64_t>(logits.size()), want.numel());
  const std::vector<float> ref(want.data<float>(), want.data<float>() + want.numel());
  const double err = testing::worst_relative_error(logits, ref, want.size(1));
  std::printf("%s: MTP logits vs transformers' decoder layer, worst row %.2e over %lld positions\n",
              GetParam().c_str(), err, static_cast<long long>(want.size(0)));
  EXPECT_LT(err, 1e-4);  // the bound of the main model's fixtures
}

// Chunked (the engine runs the module over each step's rows) = one shot, within fp32 rounding (single rows take
// the absorbed attention, chunks the expanded one).
TEST_P(MtpModule, ChunkedEqualsOneShot) {
  const DeepseekModel model = load_with_mtp(GetParam());
  const nlohmann::json reference = testing::fixture_reference(GetParam());
  const std::vector<int32_t> prompt = reference.at("prompts").back().get<std::vector<int32_t>>();
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(5);
  const std::vector<float> one_shot = run_mtp(model, prompt, next, static_cast<int64_t>(prompt.size()));
  for (int64_t chunk : {1, 7, 64}) {
    const std::vector<float> chunked = run_mtp(model, prompt, next, chunk);
    EXPECT_LT(testing::worst_relative_error(chunked, one_shot, model.config().vocab_size), 1e-5) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpModule, ::testing::Values("tiny-v3-fp32", "tiny-v3-bf16"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Through the engine: the MTP drafter's drafts verified, the outputs those of plain decoding. The fixtures' MTP
// weights are random, so few drafts are accepted; the controlled drafter's cases test acceptance and rollback.
TEST(MtpDrafter, GivesThePlainOutputs) {
  for (const char* fixture : {"tiny-v3-fp32", "tiny-v3-bf16"})
    for (float temperature : {0.0f, 0.8f}) {
      const DeepseekModel model = load_with_mtp(fixture);
      const SpeculationStats s =
          testing::expect_model_drafter_keeps_outputs(model, 1, false, temperature, 16384, fixture);
      EXPECT_GT(s.verified, 0) << fixture;
      std::printf("%s, temperature %.1f: MTP drafts %lld verified, %lld accepted\n", fixture, temperature,
                  static_cast<long long>(s.verified), static_cast<long long>(s.accepted));
    }
}

// Overlapped scheduling with the MTP drafter: every verify step's draft chained behind it (testing::LateDrafts) gives
// the in-order run (late_drafts.h), greedy and sampled, with preemption, and under the variable-length rule.
TEST(MtpDrafter, ChainedDraftsGiveTheInOrderRun) {
  DeepseekModel model = load_with_mtp("tiny-v3-bf16");
  testing::expect_chained_drafts_give_the_in_order_run(model, 1, 0.0f, 16384, "tiny-v3-bf16, greedy");
  testing::expect_chained_drafts_give_the_in_order_run(model, 1, 0.8f, 16384, "tiny-v3-bf16, sampled");
  testing::expect_chained_drafts_give_the_in_order_run(model, 1, 0.0f, 3 * 64, "tiny-v3-bf16, greedy, 3 blocks");
}

}  // namespace
}  // namespace deepinfer
