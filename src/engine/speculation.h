// Speculative decoding in the engine (issue #27): the options, the acceptance rule, the verify-cost table of the
// variable-length rule, and the statistics of a run.
//
// A verify step runs, for every running sequence, its last token followed by the drafts chosen for it, in one
// forward with the logits of every row; row j's token is sampled as a plain decode step would sample the token at
// that position (the request's seed, the position). Drafts are accepted while each equals the token sampled at
// the row before it; the emitted tokens are the sampled ones up to and including the first mismatch (or the bonus
// token after the last draft). So the output is, token for token, what decoding without speculation gives from the
// same logits, greedy or sampled, and a draft d is accepted with probability p_target(d): rejection sampling
// for a point-mass proposal, whose residual distribution is p_target without d — which is what the row's sample
// is, given that it differs from d. Rollback is the cache's count: the rows of rejected drafts stay written past
// num_cached and are overwritten by the next step (every cache kind here is paged per position, window included).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "src/engine/drafter.h"
#include "src/engine/verify_schedule.h"

namespace deepinfer {

struct SpeculationOptions {
  int64_t num_drafts = 0;        // --nextn: drafts proposed per sequence and step (0: no speculation)
  bool variable_length = false;  // --spec-varlen: the verify-length rule picks how many to verify per sequence
  Drafter* drafter = nullptr;    // required when num_drafts > 0 unless model_drafter; outlives the engine
  // The variable-length rule's cost curve comes from the first cost_warmup_steps verify steps, which verify a
  // fixed number of drafts cycling 0..num_drafts (so that the curve spans the rows the rule chooses among); it is
  // then corrected online by every step's measured time.
  int64_t cost_warmup_steps = 12;
  // The rule's candidate totals: rows a multiple of this (1: any; choose_verify_lengths).
  int64_t verify_row_quantum = 1;
  // The model's own draft module drafts: DeepSeek-V3's MTP layer (engine/mtp_drafter.h) or V4.1's DSpark layers
  // (engine/dspark_drafter.h); the model's draft module must be enabled before the engine is made, on every
  // rank, so that its cache layers travel with the KV handoff. Prefill ranks run the MTP layer over their prompts
  // too; DSpark's keys are written by the main forward itself.
  bool model_drafter = false;

  bool enabled() const { return num_drafts > 0; }
};

// The drafts of `proposal` accepted by a verify step whose rows sampled `sampled` (one per row: the sequence's
// last token, then each verified draft, so only the first sampled.size() - 1 drafts are judged): by token
// equality, or by the drafter's drawn flags where it gives them.
int64_t accepted_drafts(const DraftProposal& proposal, std::span<const int32_t> sampled);

// Verify-step times by rows: a line fitted to the medians of the warm-up steps (per row count) becomes the curve,
// later steps correct it online.
class VerifyCostTable {
 public:
  void record_warmup(int64_t rows, double ms) { warmup_ms_[rows].push_back(ms); }
  // The curve from the warm-up's medians (model() stays null if there was no warm-up step).
  void freeze();
  const VerifyCostModel* model() const { return model_ ? &*model_ : nullptr; }
  void observe(int64_t rows, double ms);
  // "rows -> ms" of the warm-up's medians and of the fitted line at its ends, for the log.
  std::string summary() const;

 private:
  std::map<int64_t, std::vector<double>> warmup_ms_;
  std::optional<VerifyCostModel> model_;
};

struct SpeculationStats {
  static constexpr int kCalibrationBins = 10;
  int64_t verify_steps = 0;
  int64_t sequence_steps = 0;  // (sequence, verify step) pairs
  int64_t drafted = 0, verified = 0, accepted = 0;
  double expected_accepted = 0;  // the sum of the verified drafts' survival a_k: what the drafter predicted
  std::vector<int64_t> reached_by_position;   // drafts verified whose predecessors were all accepted, by index k
  std::vector<int64_t> accepted_by_position;
  // Calibration of the conditional confidence c_k over reached drafts: per bin of c, the count, sum of c and
  // accepted count.
  std::array<int64_t, kCalibrationBins> bin_count{};
  std::array<double, kCalibrationBins> bin_confidence{};
  std::array<int64_t, kCalibrationBins> bin_accepted{};

  void record(const DraftProposal& proposal, int64_t num_verified, int64_t num_accepted);
  double mean_drafted() const { return ratio(drafted); }
  double mean_verified() const { return ratio(verified); }
  double mean_accepted() const { return ratio(accepted); }
  // Tokens emitted per sequence and step (1 + accepted).
  double tokens_per_sequence_step() const { return 1.0 + mean_accepted(); }
  // The expected calibration error of c_k: sum over bins of |mean c - acceptance rate| weighted by the bin's share.
  double calibration_error() const;

 private:
  double ratio(int64_t n) const { return sequence_steps > 0 ? static_cast<double>(n) / sequence_steps : 0.0; }
};

}  // namespace deepinfer
