// Speculative decoding's drafters (issue #27): what proposes the tokens a verify step checks.
//  - A drafter proposes, for one running sequence, up to max_drafts tokens to follow its last token, each with a
//    confidence c_k: its estimate that draft k is accepted given that every draft before it was. The survival
//    a_k = c_1 ... c_k is what the verify-length rule ranks (verify_schedule.h).
//  - Proposals are point masses (a drafter proposes a token, not a distribution). The engine then accepts draft k
//    exactly when it equals the token the target samples at that row with the request's own random stream
//    (speculation.h): the tokens emitted are the target's samples, so greedy and sampled outputs are those of
//    decoding without speculation, and a draft is accepted with probability p_target(draft), which is exact
//    rejection sampling for a point-mass proposal.
#pragma once

#include <cstdint>
#include <vector>

#include "src/engine/sequence.h"

namespace deepinfer {

struct DraftProposal {
  std::vector<int32_t> tokens;
  std::vector<double> confidence;  // c_k per draft, in [0, 1]
  // Benchmarks whose target cannot be replayed (a rank slice's outputs depend on the batch layout) draw each
  // draft's correctness instead of comparing tokens: empty, or one flag per draft; the engine then accepts the
  // drafts up to the first false flag (speculation.h: VerifyAcceptance::kDrawn).
  std::vector<uint8_t> drawn_correct;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_drafts tokens to follow the sequence's tokens (its last one is not yet in the KV cache).
  virtual DraftProposal propose(const Sequence& seq, int64_t max_drafts) = 0;
};

}  // namespace deepinfer
