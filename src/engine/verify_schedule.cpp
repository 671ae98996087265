#include "src/engine/verify_schedule.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "src/core/check.h"

namespace deepinfer {

VerifyCostModel::VerifyCostModel(std::vector<double> rows, std::vector<double> ms, double smoothing)
    : rows_(std::move(rows)), ms_(std::move(ms)), smoothing_(smoothing) {
  DI_CHECK(!rows_.empty() && rows_.size() == ms_.size(), "a verify cost curve needs matching rows and times");
  for (size_t i = 1; i < rows_.size(); ++i)
    DI_CHECK(rows_[i] > rows_[i - 1], "the verify cost curve's rows must ascend ({} after {})", rows_[i], rows_[i - 1]);
  DI_CHECK(smoothing_ > 0 && smoothing_ <= 1, "the cost correction's smoothing {} is not in (0, 1]", smoothing_);
}

double VerifyCostModel::curve(double rows) const {
  if (rows_.size() == 1) return ms_[0] * rows / rows_[0];
  // The segment holding `rows` (the first or the last one outside the measured range).
  size_t i = 1;
  while (i + 1 < rows_.size() && rows > rows_[i]) ++i;
  const double t = (rows - rows_[i - 1]) / (rows_[i] - rows_[i - 1]);
  return ms_[i - 1] + t * (ms_[i] - ms_[i - 1]);
}

double VerifyCostModel::predict(double rows) const { return correction_ * curve(rows); }

void VerifyCostModel::observe(double rows, double ms) {
  const double predicted = curve(rows);
  if (predicted <= 0 || ms <= 0) return;
  correction_ += smoothing_ * (ms / predicted - correction_);
}

int64_t VerifyPlan::rows() const {
  return static_cast<int64_t>(drafts.size()) + std::accumulate(drafts.begin(), drafts.end(), int64_t{0});
}

double expected_tokens(const std::vector<std::vector<double>>& survival, const std::vector<int64_t>& drafts) {
  double tokens = 0;
  for (size_t r = 0; r < survival.size(); ++r) {
    tokens += 1.0;
    for (int64_t k = 0; k < drafts[r]; ++k) tokens += survival[r][k];
  }
  return tokens;
}

VerifyPlan choose_verify_lengths(const std::vector<std::vector<double>>& survival, const VerifyCostModel& cost,
                                 int64_t row_quantum) {
  // Every draft, most probable first; a request's drafts stay in order among equals (a prefix is admitted).
  std::vector<std::tuple<double, size_t, int64_t>> pool;
  for (size_t r = 0; r < survival.size(); ++r)
    for (int64_t k = 0; k < static_cast<int64_t>(survival[r].size()); ++k) {
      DI_CHECK(k == 0 || survival[r][k] <= survival[r][k - 1], "request {}'s survival rises at draft {}", r, k);
      pool.emplace_back(survival[r][k], r, k);
    }
  std::stable_sort(pool.begin(), pool.end(), [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  const auto requests = static_cast<double>(survival.size());
  double tokens = requests, best_rate = -1;
  size_t best = 0;
  for (size_t admitted = 0;; ++admitted) {
    const double ms = cost.predict(requests + static_cast<double>(admitted));
    const double rate = ms > 0 ? tokens / ms : 0;
    const bool candidate = row_quantum <= 1 || admitted == 0 || admitted == pool.size() ||
                           (survival.size() + admitted) % static_cast<size_t>(row_quantum) == 0;
    if (candidate && rate > best_rate) best_rate = rate, best = admitted;
    if (admitted == pool.size()) break;
    tokens += std::get<0>(pool[admitted]);
  }
  VerifyPlan plan;
  plan.drafts.assign(survival.size(), 0);
  for (size_t i = 0; i < best; ++i) ++plan.drafts[std::get<1>(pool[i])];
  plan.expected_tokens = expected_tokens(survival, plan.drafts);
  plan.expected_ms = cost.predict(static_cast<double>(plan.rows()));
  return plan;
}

}  // namespace deepinfer
