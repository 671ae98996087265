// DSpark's confidence-scheduled verification (issue #27; DeepInfer's rule as its engine describes it): how many of
// its drafts each request verifies in the next step.
//  - Each request's k-th draft carries a survival probability a_k = c_1 ... c_k (the drafter's confidences): the
//    chance that it and every draft before it are accepted; non-increasing in k.
//  - A verify batch holds one row per request (its last accepted token) plus the drafts admitted; it is expected
//    to yield, per request, 1 + the sum of its admitted drafts' a_k tokens, and to take time(rows).
//  - Pool every request's drafts, admit them in decreasing order of a_k (within a request a_k never increases, so
//    each request verifies a prefix of its drafts), and keep the number admitted that maximises expected tokens
//    per unit of time. With time a function of the rows alone this is the optimum over all per-request prefix
//    lengths (for any total, the best set is the most probable drafts): tests/unit/test_verify_schedule.cpp checks
//    it against brute force.
//  - time(rows): a curve measured at warm-up (rows -> ms, piecewise linear between its points, linear past the
//    last two), corrected online by the ratio of measured to predicted step times (VerifyCostModel).
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

class VerifyCostModel {
 public:
  // Measured (rows, ms) points of a verify step, rows ascending and distinct, at least one.
  VerifyCostModel(std::vector<double> rows, std::vector<double> ms, double smoothing = 0.1);
  // The predicted time of a step of `rows` rows, with the online correction.
  double predict(double rows) const;
  // A step of `rows` rows took `ms`: the correction moves toward measured / curve by `smoothing`.
  void observe(double rows, double ms);
  double correction() const { return correction_; }

 private:
  double curve(double rows) const;
  std::vector<double> rows_, ms_;
  double smoothing_, correction_ = 1.0;
};

struct VerifyPlan {
  std::vector<int64_t> drafts;  // per request: how many of its drafts to verify (a prefix)
  double expected_tokens = 0;   // sum over requests of 1 + the verified drafts' survival
  double expected_ms = 0;
  int64_t rows() const;         // requests + verified drafts
};

// survival[r][k]: request r's k-th draft's survival probability (non-increasing in k, in [0, 1]); each request
// may have a different number of drafts (0 included). row_quantum > 1: only totals whose rows are a multiple of it
// are candidates (and none or all drafts), so that verify steps come in few shapes (a new shape costs the GPU
// first-use work: results/h200/v41/speculation).
VerifyPlan choose_verify_lengths(const std::vector<std::vector<double>>& survival, const VerifyCostModel& cost,
                                 int64_t row_quantum = 1);

// The same objective for a given plan (tests and statistics).
double expected_tokens(const std::vector<std::vector<double>>& survival, const std::vector<int64_t>& drafts);

}  // namespace deepinfer
