// Speculative decoding on the GPU (issue #27): the engine's verify steps through the CUDA models — drafts as extra
// rows of a multi-row step, every row sampled on the device, rejected rows overwritten by the next step — against
// plain decoding on the same GPU, greedy and sampled (tests/unit/speculation_cases.h). A verify row runs the kernels
// of a larger batch than a plain decode row (other linear and expert paths, other attention splits), so its logits
// may differ in their last bits: CudaVerifyRows prints by how much. V4.1 (FP8 + FP4) gives identical tokens and is
// asserted so; V3 (bf16) does not (verify rows 0.8-1.3e-2 from one-row steps on the H200, 2026-12-02: greedy outputs
// part at one token of 172, sampled ones within a few) and is not, until batch invariance (issue #28) makes a row's
// bits independent of its batch. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "src/core/device.h"
#include "src/model/backend.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

class CudaSpeculativeGeneration
    : public ::testing::TestWithParam<std::tuple<std::string, testing::SpeculationCase>> {};

TEST_P(CudaSpeculativeGeneration, GivesThePlainOutputs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const auto& [fixture, c] = GetParam();
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  WeightOrigin weights;
  weights.host = std::make_unique<WeightStore>(WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  const std::unique_ptr<CausalLm> model = make_causal_lm(std::move(config), std::move(weights), Device::kCuda, 0);
  testing::expect_speculation_keeps_outputs(*model, c);
}

// One verify step of 4 rows against 4 one-row decode steps from the same prefilled cache: the logits' relative
// error per row (printed), which is what decides whether speculation changes a GPU run's tokens.
TEST(CudaVerifyRows, MatchOneRowDecodeSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (const char* fixture : {"tiny-v3-bf16", "tiny-v41-fp8"}) {
    const auto dir = testing::fixture_dir(fixture);
    ModelConfig config = load_model_config(dir);
    WeightOrigin weights;
    weights.host = std::make_unique<WeightStore>(WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
    const std::unique_ptr<CausalLm> model = make_causal_lm(std::move(config), std::move(weights), Device::kCuda, 0);
    const int64_t vocab = model->config().vocab_size, prompt = 60, rows = 4;
    const std::vector<int32_t> table = {0, 1};
    std::unique_ptr<KvCache> one_row = model->make_kv_cache(2), verify = model->make_kv_cache(2);
    ForwardBatch prefill;
    for (int64_t t = 0; t < prompt; ++t) prefill.token_ids.push_back(static_cast<int32_t>(2 + (t * 37 + 5) % (vocab - 2)));
    prefill.sequences.push_back({0, prompt, table});
    model->forward(prefill, *one_row);
    model->forward(prefill, *verify);
    const std::vector<int32_t> next = {7, 11, 13, 17};
    std::vector<float> a;
    for (int64_t r = 0; r < rows; ++r) {
      ForwardBatch step;
      step.token_ids = {next[r]};
      step.sequences.push_back({prompt + r, 1, table});
      const Tensor logits = model->forward(step, *one_row);
      a.insert(a.end(), logits.data<float>(), logits.data<float>() + vocab);
    }
    ForwardBatch step;
    step.token_ids = next;
    step.sequences.push_back({prompt, rows, table});
    step.all_logits = step.speculative_verify = true;
    const Tensor b = model->forward(step, *verify);
    ASSERT_EQ(b.numel(), rows * vocab);
    for (int64_t r = 0; r < rows; ++r) {
      double diff = 0, ref = 0;
      int64_t argmax_a = 0, argmax_b = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double x = a[r * vocab + v], y = b.data<float>()[r * vocab + v];
        diff += (x - y) * (x - y);
        ref += x * x;
        if (x > a[r * vocab + argmax_a]) argmax_a = v;
        if (y > b.data<float>()[r * vocab + argmax_b]) argmax_b = v;
      }
      const double rel = std::sqrt(diff / ref);
      std::printf("%s: verify row %lld against a one-row decode step: relative error %.3e, argmax %lld vs %lld\n",
                  fixture, static_cast<long long>(r), rel, static_cast<long long>(argmax_b),
                  static_cast<long long>(argmax_a));
      // Measured on the H200: V3 0.8-1.3e-2, V4.1 0 (the first row) to 2.7e-3.
      EXPECT_LT(rel, 3e-2) << fixture << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSpeculativeGeneration,
                         ::testing::Combine(::testing::Values("tiny-v41-fp8"),
                                            ::testing::ValuesIn(testing::speculation_cases())),
                         [](const auto& info) { return testing::speculation_case_name(info.param); });

}  // namespace
}  // namespace deepinfer
