// Speculative decoding on the GPU (issue #27): the engine's verify steps through the CUDA models — drafts as extra
// rows of a multi-row step, every row sampled on the device, rejected rows overwritten by the next step — against
// plain decoding on the same GPU, greedy and sampled, V3 and V4.1 (tests/unit/speculation_cases.h). A verify row
// runs the multi-row kernels (prefill-form attention, tensor-core linears) where a decode row runs the one-row
// ones, so the logits may differ in their last bits (issue #28): the tokens are compared, and where they differ
// the first divergence is printed. Skipped without a GPU.
#include <gtest/gtest.h>

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

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSpeculativeGeneration,
                         ::testing::Combine(::testing::Values("tiny-v3-bf16", "tiny-v41-fp8"),
                                            ::testing::ValuesIn(testing::speculation_cases())),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace deepinfer
