// Speculative decoding (engine/speculation.h, engine/controlled_drafter.h): the acceptance rule is exact
// rejection sampling for point-mass drafts, the controlled drafter is calibrated, and through the engine the
// outputs with speculation (fixed and variable length, greedy and sampled) are those without, on V2, V3 and V4.1.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/sampling.h"
#include "src/engine/block_manager.h"
#include "src/model/backend.h"
#include "tests/unit/fixtures.h"
#include "tests/unit/speculation_cases.h"

namespace deepinfer {
namespace {

// Over many seeds, a draft d of a row with target probabilities p is accepted with probability p(d), and the token
// emitted on rejection follows p without d, renormalised: the emitted token follows p (chi-square, 7 degrees of
// freedom, at the 0.1% level: 24.3).
TEST(SpeculationAcceptance, IsRejectionSamplingOfThePointMassDraft) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, 1.5f, 0.2f, -1.0f};
  const auto vocab = static_cast<int64_t>(logits.size());
  constexpr float kTemperature = 0.9f;
  std::vector<double> p(vocab);
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += p[v] = std::exp((logits[v] - 2.0) / kTemperature);
  for (double& x : p) x /= total;
  constexpr int32_t kDraft = 5;
  constexpr int kTrials = 40000;
  std::vector<int64_t> emitted(vocab, 0), rejected_emitted(vocab, 0);
  int64_t accepted = 0;
  for (int t = 0; t < kTrials; ++t) {
    const cpu::SamplingRow row{kTemperature, 1.0f, 0, static_cast<uint64_t>(t) * 7919 + 3, 17};
    int32_t sampled = -1;
    cpu::sample_rows(logits.data(), 1, vocab, &row, &sampled);
    DraftProposal proposal;
    proposal.tokens = {kDraft};
    proposal.confidence = {0.5};
    const int32_t rows[2] = {sampled, 0};  // the draft's row, then the (unused) row after it
    const int64_t a = accepted_drafts(proposal, rows);
    accepted += a;
    const int32_t out = a == 1 ? kDraft : sampled;
    ++emitted[out];
    if (a == 0) ++rejected_emitted[out];
  }
  const double rate = static_cast<double>(accepted) / kTrials;
  EXPECT_NEAR(rate, p[kDraft], 4 * std::sqrt(p[kDraft] * (1 - p[kDraft]) / kTrials));
  double chi2 = 0, chi2_rejected = 0;
  const int64_t num_rejected = kTrials - accepted;
  for (int64_t v = 0; v < vocab; ++v) {
    const double expected = p[v] * kTrials;
    chi2 += (emitted[v] - expected) * (emitted[v] - expected) / expected;
    if (v == kDraft) {
      EXPECT_EQ(rejected_emitted[v], 0);
      continue;
    }
    const double expected_rejected = p[v] / (1 - p[kDraft]) * num_rejected;
    chi2_rejected += (rejected_emitted[v] - expected_rejected) * (rejected_emitted[v] - expected_rejected) / expected_rejected;
  }
  EXPECT_LT(chi2, 24.3);
  EXPECT_LT(chi2_rejected, 22.5);  // 6 degrees of freedom
}

TEST(SpeculationAcceptance, StopsAtTheFirstMismatchOrDrawnFailure) {
  DraftProposal p;
  p.tokens = {4, 5, 6};
  p.confidence = {0.9, 0.9, 0.9};
  EXPECT_EQ(accepted_drafts(p, std::vector<int32_t>{4, 5, 6, 7}), 3);
  EXPECT_EQ(accepted_drafts(p, std::vector<int32_t>{4, 9, 6, 7}), 1);
  EXPECT_EQ(accepted_drafts(p, std::vector<int32_t>{1, 5, 6, 7}), 0);
  EXPECT_EQ(accepted_drafts(p, std::vector<int32_t>{4, 5}), 1);  // only one draft was verified
  p.drawn_correct = {1, 0, 1};
  EXPECT_EQ(accepted_drafts(p, std::vector<int32_t>{0, 0, 0, 0}), 1);
}

// The controlled drafter's confidences have the asked mean and are calibrated: a draft of confidence c is correct
// with probability c (drawn mode, many proposals).
TEST(ControlledDrafter, ConfidenceHasTheMeanAndIsCalibrated) {
  for (const auto& [mean, spread] : std::vector<std::pair<double, double>>{{0.8, 1.0}, {0.6, 2.0}, {0.9, 0.0}}) {
    ControlledDrafter drafter({mean, spread, 11}, 1000);
    EXPECT_NEAR(logit_normal_mean(drafter.logit_location(), spread), mean, 1e-9);
    Request request;
    Sequence seq;
    seq.request = &request;
    seq.tokens = {1, 2, 3};
    seq.num_prompt_tokens = 3;
    SpeculationStats stats;
    double sum_c = 0;
    int64_t n = 0;
    for (int64_t i = 0; i < 4000; ++i) {
      request.id = i;
      const DraftProposal p = drafter.propose(seq, 5);
      ASSERT_EQ(p.size(), 5);
      ASSERT_EQ(p.drawn_correct.size(), 5u);
      for (double c : p.confidence) sum_c += c, ++n;
      int64_t accepted = 0;
      while (accepted < 5 && p.drawn_correct[accepted] != 0) ++accepted;
      stats.record(p, 5, accepted);
    }
    EXPECT_NEAR(sum_c / n, mean, 0.01) << mean << " " << spread;
    EXPECT_LT(stats.calibration_error(), 0.02) << mean << " " << spread;
    // Reached drafts are accepted at the mean rate (each is correct with its own c, independently).
    EXPECT_NEAR(static_cast<double>(stats.accepted_by_position[0]) / stats.reached_by_position[0], mean, 0.03);
  }
}

TEST(ControlledDrafter, ProposesTheReferenceWhenCorrectAndNothingPastIt) {
  Request request;
  request.id = "a";
  Sequence seq;
  seq.request = &request;
  seq.tokens = {1, 2, 3, 40};  // the prompt, then the first output token
  seq.num_prompt_tokens = 3;
  ControlledDrafter drafter({0.5, 1.0, 3}, 100, {{"\"a\"", {40, 41, 42, 43}}});
  const DraftProposal p = drafter.propose(seq, 8);
  ASSERT_EQ(p.size(), 3);  // the reference has three more tokens
  EXPECT_TRUE(p.drawn_correct.empty());
  for (int64_t k = 0; k < 3; ++k) EXPECT_TRUE(p.tokens[k] == 41 + k || p.tokens[k] == 42 + k) << k;
  request.id = "unknown";
  EXPECT_EQ(drafter.propose(seq, 8).size(), 0);
}

// The variable-length rule's cost curve: a line through the warm-up's medians per row count (noisy points on a
// line give the line; a falling fit is held flat), corrected online.
TEST(VerifyCostTable, FitsALineThroughTheWarmupMedians) {
  VerifyCostTable table;
  EXPECT_EQ(table.model(), nullptr);
  for (int64_t rows : {60, 120, 180, 240}) {
    const double line = 40.0 + 0.1 * static_cast<double>(rows);
    for (double noise : {-1.0, 0.0, 5.0}) table.record_warmup(rows, line + noise);  // the median is the line
  }
  table.freeze();
  ASSERT_NE(table.model(), nullptr);
  EXPECT_NEAR(table.model()->predict(150), 55.0, 1e-9);
  EXPECT_NEAR(table.model()->predict(300), 70.0, 1e-9);  // extrapolated
  table.observe(150, 66.0);  // 20% slower than predicted: the correction moves a tenth of the way
  EXPECT_NEAR(table.model()->correction(), 1.02, 1e-9);

  VerifyCostTable falling;
  falling.record_warmup(10, 5.0);
  falling.record_warmup(20, 4.0);
  falling.freeze();
  EXPECT_NEAR(falling.model()->predict(10), falling.model()->predict(20), 1e-9);
}

TEST(BlockManagerShrink, ReturnsTheBlocksPastTheTokens) {
  BlockManager blocks(8, 64, /*prefix_cache=*/true);
  Sequence seq;
  blocks.grow(seq, 200);  // 4 blocks
  EXPECT_EQ(blocks.num_free_blocks(), 4);
  blocks.shrink(seq, 65);
  EXPECT_EQ(seq.block_table.size(), 2u);
  EXPECT_EQ(blocks.num_free_blocks(), 6);
  blocks.shrink(seq, 128);  // already fits
  EXPECT_EQ(seq.block_table.size(), 2u);
  blocks.release(seq);
  EXPECT_EQ(blocks.num_free_blocks(), 8);
}

class SpeculativeGeneration
    : public ::testing::TestWithParam<std::tuple<std::string, testing::SpeculationCase>> {};

TEST_P(SpeculativeGeneration, GivesThePlainOutputs) {
  const auto& [fixture, c] = GetParam();
  const auto dir = testing::fixture_dir(fixture);
  ModelConfig config = load_model_config(dir);
  WeightOrigin weights;
  weights.host = std::make_unique<WeightStore>(WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  const std::unique_ptr<CausalLm> model = make_causal_lm(std::move(config), std::move(weights), Device::kCpu, 0);
  const SpeculationStats s = testing::expect_speculation_keeps_outputs(*model, c);
  if (c.variable_length) {
    EXPECT_LT(s.verified, s.drafted) << "the rule verified every draft";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeGeneration,
                         ::testing::Combine(::testing::Values("tiny-v2-fp32", "tiny-v3-bf16", "tiny-v41"),
                                            ::testing::ValuesIn(testing::speculation_cases())),
                         [](const auto& info) { return testing::speculation_case_name(info.param); });

}  // namespace
}  // namespace deepinfer
