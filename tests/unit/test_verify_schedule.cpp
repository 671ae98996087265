// DSpark's verify-length rule (src/engine/verify_schedule.h) against the brute-force optimum over every request's
// prefix length, on constructed survival probabilities and cost curves.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "src/engine/verify_schedule.h"

namespace deepinfer {
namespace {

// Survival a_k = c_1 ... c_k with each confidence drawn in [lo, 1].
std::vector<std::vector<double>> draw_survival(std::mt19937_64& rng, int64_t requests, int64_t max_drafts, double lo) {
  std::uniform_real_distribution<double> conf(lo, 1.0);
  std::uniform_int_distribution<int64_t> drafts(0, max_drafts);
  std::vector<std::vector<double>> s(requests);
  for (auto& row : s) {
    double a = 1.0;
    for (int64_t k = drafts(rng); k > 0; --k) row.push_back(a *= conf(rng));
  }
  return s;
}

// The best expected tokens per ms over every combination of prefix lengths.
double brute_force_rate(const std::vector<std::vector<double>>& s, const VerifyCostModel& cost) {
  std::vector<int64_t> drafts(s.size(), 0);
  double best = 0;
  std::function<void(size_t)> walk = [&](size_t r) {
    if (r == s.size()) {
      int64_t rows = static_cast<int64_t>(s.size());
      for (int64_t d : drafts) rows += d;
      best = std::max(best, expected_tokens(s, drafts) / cost.predict(static_cast<double>(rows)));
      return;
    }
    for (int64_t d = 0; d <= static_cast<int64_t>(s[r].size()); ++d) {
      drafts[r] = d;
      walk(r + 1);
    }
    drafts[r] = 0;
  };
  walk(0);
  return best;
}

TEST(VerifySchedule, MatchesTheBruteForceOptimum) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t requests = 1 + trial % 4;
    const auto s = draw_survival(rng, requests, 5, trial % 2 == 0 ? 0.2 : 0.7);
    // A cost curve of any shape over rows 1..25 (convex, concave, stepped): positive times.
    std::vector<double> rows, ms;
    std::uniform_real_distribution<double> step(0.0, 3.0);
    double t = 1.0 + step(rng);
    for (int64_t x = 1; x <= 25; x += 1 + static_cast<int64_t>(trial % 3)) {
      rows.push_back(static_cast<double>(x));
      ms.push_back(t += trial % 5 == 0 ? (x % 8 == 0 ? 4.0 : 0.05) : step(rng));
    }
    const VerifyCostModel cost(rows, ms);
    const VerifyPlan plan = choose_verify_lengths(s, cost);
    for (size_t r = 0; r < s.size(); ++r) ASSERT_LE(plan.drafts[r], static_cast<int64_t>(s[r].size()));
    const double rate = plan.expected_tokens / plan.expected_ms, best = brute_force_rate(s, cost);
    ASSERT_NEAR(rate, best, 1e-12 * best) << "trial " << trial;
  }
}

// With a row quantum the rule picks among totals whose rows are a multiple of it (or none, or all drafts): the
// best of those, the most probable drafts first.
TEST(VerifySchedule, RowQuantumKeepsStepsOnFewShapes) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const auto s = draw_survival(rng, 6, 5, 0.5);
    size_t pool = 0;
    for (const auto& row : s) pool += row.size();
    const VerifyCostModel cost({6, 36}, {10.0, 10.0 + 0.3 * (1 + trial % 7)});
    const int64_t quantum = 4;
    const VerifyPlan plan = choose_verify_lengths(s, cost, quantum);
    const int64_t admitted = plan.rows() - 6;
    EXPECT_TRUE(admitted == 0 || admitted == static_cast<int64_t>(pool) || plan.rows() % quantum == 0) << plan.rows();
    // No other candidate total does better: the top-n drafts for each candidate n.
    std::vector<double> all;
    for (const auto& row : s) all.insert(all.end(), row.begin(), row.end());
    std::sort(all.rbegin(), all.rend());
    double tokens = 6, best = 6 / cost.predict(6);
    for (size_t n = 1; n <= all.size(); ++n) {
      tokens += all[n - 1];
      if (n == all.size() || (6 + n) % quantum == 0) best = std::max(best, tokens / cost.predict(6.0 + n));
    }
    EXPECT_NEAR(plan.expected_tokens / plan.expected_ms, best, 1e-12 * best) << "trial " << trial;
  }
}

TEST(VerifySchedule, FlatCostVerifiesEverythingSteepCostNothingUncertain) {
  const std::vector<std::vector<double>> s = {{0.9, 0.8, 0.5, 0.2, 0.1}, {0.95, 0.9}, {}};
  // A step costs the same up to 64 rows (memory-bound decode): every draft is worth verifying.
  const VerifyPlan flat = choose_verify_lengths(s, VerifyCostModel({1, 64}, {10, 10}));
  EXPECT_EQ(flat.drafts, (std::vector<int64_t>{5, 2, 0}));
  EXPECT_DOUBLE_EQ(flat.expected_tokens, 3 + 0.9 + 0.8 + 0.5 + 0.2 + 0.1 + 0.95 + 0.9);
  // Each row costing as much as a whole token: a draft pays only if it raises the tokens per row, here none
  // below the mean of what is admitted (3 base rows, then the drafts by survival).
  const VerifyPlan steep = choose_verify_lengths(s, VerifyCostModel({1, 2}, {1, 2}));
  EXPECT_EQ(steep.drafts, (std::vector<int64_t>{0, 0, 0}));
}

TEST(VerifySchedule, OnlineCorrectionScalesPredictionsNotChoices) {
  VerifyCostModel cost({1, 16, 64}, {5, 6, 20});
  std::mt19937_64 rng(3);
  const auto s = draw_survival(rng, 6, 5, 0.5);
  const VerifyPlan before = choose_verify_lengths(s, cost);
  EXPECT_DOUBLE_EQ(cost.predict(40), 6 + (40.0 - 16) / 48 * 14);
  for (int i = 0; i < 200; ++i) cost.observe(40, 2 * (6 + (40.0 - 16) / 48 * 14));  // steps take twice the curve
  EXPECT_NEAR(cost.correction(), 2.0, 1e-6);
  EXPECT_NEAR(cost.predict(16), 12.0, 1e-5);
  EXPECT_EQ(choose_verify_lengths(s, cost).drafts, before.drafts);  // a uniform factor changes no choice
  // Past the last point the curve goes on linearly; below the first, along the first segment.
  const VerifyCostModel line({8, 16}, {4, 6});
  EXPECT_DOUBLE_EQ(line.predict(32), 10);
  EXPECT_DOUBLE_EQ(line.predict(4), 3);
}

TEST(VerifySchedule, RefusesARisingSurvival) {
  EXPECT_ANY_THROW(choose_verify_lengths({{0.5, 0.6}}, VerifyCostModel({1}, {1})));
  EXPECT_ANY_THROW(VerifyCostModel({2, 1}, {1, 1}));
}

}  // namespace
}  // namespace deepinfer
