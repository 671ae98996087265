#include "src/engine/controlled_drafter.h"

#include <cmath>

#include "src/core/check.h"
#include "src/core/random.h"

namespace deepinfer {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Keys of the drafter's two draws, apart from each other and from everything else seeded by the same seed.
constexpr uint64_t kConfidenceStream = fnv1a64("controlled drafter: confidence");
constexpr uint64_t kCorrectStream = fnv1a64("controlled drafter: correct");

}  // namespace

double logit_normal_mean(double location, double spread) {
  if (spread == 0) return sigmoid(location);
  // The normal's density on a fine grid over +-8 sigma; the integrand is smooth and bounded.
  constexpr int kPoints = 4001;
  double sum = 0, weight = 0;
  for (int i = 0; i < kPoints; ++i) {
    const double z = -8.0 + 16.0 * i / (kPoints - 1);
    const double w = std::exp(-0.5 * z * z);
    sum += w * sigmoid(location + spread * z);
    weight += w;
  }
  return sum / weight;
}

ControlledDrafter::ControlledDrafter(ControlledDraftOptions options, int64_t vocab_size,
                                     std::unordered_map<std::string, std::vector<int32_t>> reference)
    : options_(options), vocab_size_(vocab_size), reference_(std::move(reference)) {
  DI_INPUT_CHECK(options.mean_acceptance > 0 && options.mean_acceptance < 1,
                 "--draft-acceptance {} is not in (0, 1)", options.mean_acceptance);
  DI_INPUT_CHECK(options.spread >= 0 && options.spread <= 10, "--draft-spread {} is not in [0, 10]", options.spread);
  DI_CHECK(vocab_size > 1, "a vocabulary of {} tokens leaves no wrong draft", vocab_size);
  // The mean is increasing in the location: bisect.
  double lo = -40, hi = 40;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (logit_normal_mean(mid, options.spread) < options.mean_acceptance ? lo : hi) = mid;
  }
  location_ = 0.5 * (lo + hi);
}

DraftProposal ControlledDrafter::propose(const Sequence& seq, int64_t max_drafts) {
  DraftProposal proposal;
  const std::vector<int32_t>* reference = nullptr;
  if (!reference_.empty()) {
    const auto it = reference_.find(seq.request->id.dump());
    if (it == reference_.end()) return proposal;  // nothing known of this request's continuation: no drafts
    reference = &it->second;
  }
  const uint64_t key = splitmix64(options_.seed ^ fnv1a64(seq.request->id.dump()));
  for (int64_t k = 0; k < max_drafts; ++k) {
    const int64_t position = seq.num_tokens() + k;  // where the draft lands
    const int64_t output_idx = position - seq.num_prompt_tokens;
    if (reference != nullptr && output_idx >= static_cast<int64_t>(reference->size())) break;
    const uint64_t draw = static_cast<uint64_t>(position) * 64 + static_cast<uint64_t>(k);
    const double c = sigmoid(location_ + options_.spread * normal_at(key ^ kConfidenceStream, draw));
    const bool correct = uniform_at(key ^ kCorrectStream, draw) < c;
    if (reference != nullptr) {
      const int32_t truth = (*reference)[output_idx];
      proposal.tokens.push_back(correct ? truth : static_cast<int32_t>((truth + 1) % vocab_size_));
    } else {
      proposal.tokens.push_back(seq.tokens.back());
      proposal.drawn_correct.push_back(correct ? 1 : 0);
    }
    proposal.confidence.push_back(c);
  }
  return proposal;
}

}  // namespace deepinfer
