// A drafter of controlled acceptance (issue #27's yardstick for the verify-length rule): each draft's confidence
// c is drawn from a logit-normal distribution of a chosen mean acceptance and spread, and the draft is correct
// with probability exactly c, so the confidences are calibrated by construction.
//  - With the target's own continuation of a request (`reference`: the outputs of a run without speculation, as
//    the engine's outputs do not depend on speculation), a correct draft is the reference token and a wrong one
//    another token; the engine's acceptance then compares tokens, as for any drafter.
//  - Without one (benchmarks on dummy weights and rank slices, whose outputs depend on the batch layout and so
//    cannot be replayed), the proposal carries the drawn correctness (DraftProposal::drawn_correct) and the
//    engine accepts by it; the tokens are the reference-free stand-in (the sequence's last token).
// Every draw is counter-based on (seed, request id, position, draft index) and separate from the target's
// sampling stream, so a run is reproducible and the target's tokens never depend on the drafter's draws.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/engine/drafter.h"

namespace deepinfer {

struct ControlledDraftOptions {
  double mean_acceptance = 0.8;  // E[c] over drafts, in (0, 1)
  double spread = 1.0;           // the standard deviation of logit(c); 0: every draft's c is the mean
  uint64_t seed = 0;
};

class ControlledDrafter final : public Drafter {
 public:
  // `reference`: request id (its JSON text, as id.dump() gives it) -> the target's output tokens (empty map:
  // drawn correctness).
  ControlledDrafter(ControlledDraftOptions options, int64_t vocab_size,
                    std::unordered_map<std::string, std::vector<int32_t>> reference = {});
  DraftProposal propose(const Sequence& seq, int64_t max_drafts) override;
  // The logit-normal's location that gives the options' mean acceptance.
  double logit_location() const { return location_; }

 private:
  ControlledDraftOptions options_;
  int64_t vocab_size_;
  std::unordered_map<std::string, std::vector<int32_t>> reference_;
  double location_;
};

// E[sigmoid(location + spread * z)], z ~ N(0, 1) (quadrature).
double logit_normal_mean(double location, double spread);

}  // namespace deepinfer
