#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "src/engine/request.h"

#include "kernels/cpu/sampling.h"
#include "kernels/philox.h"

namespace deepinfer {
namespace {

// One row through cpu::sample_rows.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, int64_t position) {
  const cpu::SamplingRow row{p.temperature, p.top_p, p.top_k, p.seed, position};
  int32_t token = -1;
  cpu::sample_rows(logits, 1, vocab, &row, &token);
  return token;
}

// Random123's known answer for Philox4x32-10 at counter 0, key 0: 6627e8d5 e169c58d bc57ac4c 9b00dbd8; the
// uniform is the first word's top 24 bits.
TEST(Sampler, PhiloxMatchesTheKnownAnswer) {
  EXPECT_EQ(philox_uniform(0, 0), static_cast<float>(0x6627e8d5u >> 8) * 0x1.0p-24f);
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sample_token(logits.data(), 4, {}, 0), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {0.1f, 0.3f, 1.5f, 1.4f, -2.0f};
  SamplingParams top_k;
  top_k.temperature = 1.0f;
  top_k.top_k = 1;
  SamplingParams top_p;
  top_p.temperature = 1.0f;
  top_p.top_p = 1e-6f;
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(sample_token(logits.data(), 5, top_k, position), 2);
    EXPECT_EQ(sample_token(logits.data(), 5, top_p, position), 2);
  }
}

TEST(Sampler, SeededStreamIsReproducibleAndFollowsTheDistribution) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 1234;
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int64_t position = 0; position < n; ++position) {
    const int32_t token = sample_token(logits.data(), 3, params, position);
    EXPECT_EQ(token, sample_token(logits.data(), 3, params, position));
    ++counts[token];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

}  // namespace
}  // namespace deepinfer
