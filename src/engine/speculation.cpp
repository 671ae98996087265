#include "src/engine/speculation.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"

namespace deepinfer {

int64_t accepted_drafts(const DraftProposal& proposal, std::span<const int32_t> sampled) {
  const int64_t n = std::min<int64_t>(proposal.size(), static_cast<int64_t>(sampled.size()) - 1);
  int64_t k = 0;
  if (!proposal.drawn_correct.empty()) {
    while (k < n && proposal.drawn_correct[k] != 0) ++k;
  } else {
    while (k < n && proposal.tokens[k] == sampled[k]) ++k;
  }
  return k;
}

void VerifyCostTable::freeze() {
  if (warmup_ms_.empty()) return;
  // A least-squares line through the medians: the points are few and noisy, and a piecewise curve through them
  // has kinks at multiples of the batch where the rule then stops (seen on the H200: every request verified
  // exactly 3 of its 5 drafts at 16 and 96 requests). The line is kept as its two ends (the model extrapolates).
  std::vector<double> rows, ms;
  for (auto& [r, samples] : warmup_ms_) {
    std::sort(samples.begin(), samples.end());
    rows.push_back(static_cast<double>(r));
    ms.push_back(samples[samples.size() / 2]);
  }
  if (rows.size() == 1) {
    model_.emplace(rows, ms);
    return;
  }
  const auto n = static_cast<double>(rows.size());
  double mean_r = 0, mean_t = 0;
  for (size_t i = 0; i < rows.size(); ++i) mean_r += rows[i] / n, mean_t += ms[i] / n;
  double cov = 0, var = 0;
  for (size_t i = 0; i < rows.size(); ++i) cov += (rows[i] - mean_r) * (ms[i] - mean_t), var += (rows[i] - mean_r) * (rows[i] - mean_r);
  const double slope = std::max(0.0, cov / var);  // more rows never cost less
  const double lo = rows.front(), hi = rows.back();
  model_.emplace(std::vector<double>{lo, hi},
                 std::vector<double>{mean_t + slope * (lo - mean_r), mean_t + slope * (hi - mean_r)});
}

std::string VerifyCostTable::summary() const {
  std::string out = "measured";
  for (const auto& [r, samples] : warmup_ms_) out += fmt::format(" {}: {:.2f} ms", r, samples[samples.size() / 2]);
  if (model_ && !warmup_ms_.empty()) {
    const int64_t lo = warmup_ms_.begin()->first, hi = warmup_ms_.rbegin()->first;
    out += fmt::format("; line {}: {:.2f} ms, {}: {:.2f} ms", lo, model_->predict(static_cast<double>(lo)), hi,
                       model_->predict(static_cast<double>(hi)));
  }
  return out;
}

void VerifyCostTable::observe(int64_t rows, double ms) {
  if (model_) model_->observe(static_cast<double>(rows), ms);
}

void SpeculationStats::record(const DraftProposal& proposal, int64_t num_verified, int64_t num_accepted) {
  DI_CHECK(num_accepted <= num_verified && num_verified <= proposal.size(), "accepted {} of {} verified of {} drafts",
           num_accepted, num_verified, proposal.size());
  ++sequence_steps;
  drafted += proposal.size();
  verified += num_verified;
  accepted += num_accepted;
  if (static_cast<int64_t>(reached_by_position.size()) < num_verified) {
    reached_by_position.resize(num_verified, 0);
    accepted_by_position.resize(num_verified, 0);
  }
  double survival = 1.0;
  for (int64_t k = 0; k < num_verified; ++k) {
    const double c = std::clamp(proposal.confidence[k], 0.0, 1.0);
    survival *= c;
    expected_accepted += survival;
    if (k > num_accepted) continue;  // an earlier draft was rejected: this one was never put to the test
    const bool ok = k < num_accepted;
    ++reached_by_position[k];
    accepted_by_position[k] += ok ? 1 : 0;
    const int bin = std::min(kCalibrationBins - 1, static_cast<int>(c * kCalibrationBins));
    ++bin_count[bin];
    bin_confidence[bin] += c;
    bin_accepted[bin] += ok ? 1 : 0;
  }
}

double SpeculationStats::calibration_error() const {
  int64_t total = 0;
  for (int64_t n : bin_count) total += n;
  if (total == 0) return 0.0;
  double error = 0;
  for (int b = 0; b < kCalibrationBins; ++b) {
    if (bin_count[b] == 0) continue;
    const double n = static_cast<double>(bin_count[b]);
    error += n / total * std::abs(bin_confidence[b] / n - bin_accepted[b] / n);
  }
  return error;
}

}  // namespace deepinfer
