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
  std::vector<double> rows, ms;
  for (auto& [r, samples] : warmup_ms_) {
    std::sort(samples.begin(), samples.end());
    rows.push_back(static_cast<double>(r));
    ms.push_back(samples[samples.size() / 2]);
  }
  model_.emplace(std::move(rows), std::move(ms));
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
