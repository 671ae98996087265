#include "src/moe/synthetic_routing.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"
#include "src/core/random.h"

namespace deepinfer {

SyntheticRouting::SyntheticRouting(const std::string& spec, uint64_t seed, int64_t num_layers, int64_t num_experts,
                                   int64_t top_k)
    : spec_(spec), seed_(seed), num_experts_(num_experts), top_k_(top_k) {
  DI_INPUT_CHECK(top_k > 0 && top_k <= num_experts, "--routing: {} experts a token out of {}", top_k, num_experts);
  if (spec == "uniform") return;
  DI_INPUT_CHECK(spec.starts_with("zipf:"), "--routing '{}': expected 'uniform' or 'zipf:S'", spec);
  try {
    size_t used = 0;
    exponent_ = std::stod(spec.substr(5), &used);
    DI_INPUT_CHECK(used == spec.size() - 5, "--routing '{}': S is not a number", spec);
  } catch (const std::logic_error&) {
    throw InputError(fmt::format("--routing '{}': S is not a number", spec));
  }
  // Distinct experts are drawn by rejection; up to S = 2 the experts left after the hottest top_k - 1 keep enough
  // mass (at 384 experts and top-6, 11%) for that to stay a few draws a pair.
  DI_INPUT_CHECK(exponent_ > 0.0 && exponent_ <= 2.0, "--routing '{}': S must be in (0, 2]", spec);
  double total = 0.0;
  for (int64_t i = 0; i < num_experts; ++i) cumulative_.push_back(total += std::pow(static_cast<double>(i + 1), -exponent_));
  for (int64_t l = 0; l < num_layers; ++l) {  // a seeded permutation per layer: the hot experts differ by layer
    std::vector<int32_t> order(num_experts);
    for (int64_t e = 0; e < num_experts; ++e) order[e] = static_cast<int32_t>(e);
    for (int64_t i = num_experts - 1; i > 0; --i)
      std::swap(order[i], order[static_cast<int64_t>(uniform_at(seed ^ 0x5a17ull, (l << 32) + i) * (i + 1))]);
    by_popularity_.push_back(std::move(order));
  }
}

void SyntheticRouting::route(int64_t step, int64_t layer, int64_t token, int32_t* ids, float* weights) const {
  const uint64_t key = splitmix64(seed_ ^ splitmix64((static_cast<uint64_t>(step) << 20) ^ static_cast<uint64_t>(layer)));
  int64_t taken = 0;
  for (uint64_t draw = 0; taken < top_k_; ++draw) {
    const double u = uniform_at(key, (static_cast<uint64_t>(token) << 16) + draw);
    int32_t expert;
    if (exponent_ == 0.0) {
      expert = static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(u * num_experts_), num_experts_ - 1));
    } else {
      const double target = u * cumulative_.back();
      const auto rank = std::lower_bound(cumulative_.begin(), cumulative_.end(), target) - cumulative_.begin();
      expert = by_popularity_[layer][std::min<int64_t>(rank, num_experts_ - 1)];
    }
    if (std::find(ids, ids + taken, expert) != ids + taken) continue;  // distinct experts
    ids[taken] = expert;
    weights[taken] = 1.0f / static_cast<float>(top_k_);
    ++taken;
  }
}

}  // namespace deepinfer
