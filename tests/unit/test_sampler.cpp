#include <gtest/gtest.h>

#include <map>

#include "src/engine/sampler.h"

namespace deepinfer {
namespace {

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  std::vector<float> scratch;
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sample_token(logits.data(), 4, {}, 0, scratch), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  std::vector<float> scratch;
  const std::vector<float> logits = {0.1f, 0.3f, 1.5f, 1.4f, -2.0f};
  SamplingParams top_k;
  top_k.temperature = 1.0f;
  top_k.top_k = 1;
  SamplingParams top_p;
  top_p.temperature = 1.0f;
  top_p.top_p = 1e-6f;
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(sample_token(logits.data(), 5, top_k, position, scratch), 2);
    EXPECT_EQ(sample_token(logits.data(), 5, top_p, position, scratch), 2);
  }
}

TEST(Sampler, SeededStreamIsReproducibleAndFollowsTheDistribution) {
  std::vector<float> scratch;
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 1234;
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int64_t position = 0; position < n; ++position) {
    const int32_t token = sample_token(logits.data(), 3, params, position, scratch);
    EXPECT_EQ(token, sample_token(logits.data(), 3, params, position, scratch));
    ++counts[token];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

}  // namespace
}  // namespace deepinfer
