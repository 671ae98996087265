// Routing drawn from a stated distribution instead of the router's choice, for benchmarks that stand for a
// deployment (`--routing uniform|zipf:S`): a token's experts depend only on (seed, step, MoE layer, the token's
// index across its EP group), so every rank of a real run and a rank slice standing for one of them (bench
// --rank-slice, moe/rank_slice_dispatcher.h) draw the same pairs.
//  - uniform: top_k distinct experts, each equally likely;
//  - zipf:S:  expert of popularity rank i (a seeded permutation per layer) drawn with weight 1 / (i + 1)^S, top_k
//             distinct (repeats drawn again), 0 < S <= 2.
// Every pair's weight is 1 / top_k.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

class SyntheticRouting {
 public:
  // `spec`: "uniform" or "zipf:S" (S > 0). InputError otherwise.
  SyntheticRouting(const std::string& spec, uint64_t seed, int64_t num_layers, int64_t num_experts, int64_t top_k);

  // ids/weights [top_k] of token `token` (its index across the EP group) at `step` in MoE layer `layer`.
  void route(int64_t step, int64_t layer, int64_t token, int32_t* ids, float* weights) const;
  const std::string& spec() const { return spec_; }
  int64_t top_k() const { return top_k_; }

 private:
  std::string spec_;
  uint64_t seed_;
  int64_t num_experts_, top_k_;
  double exponent_ = 0.0;              // 0: uniform
  std::vector<std::vector<int32_t>> by_popularity_;  // zipf: [layer][rank] -> expert
  std::vector<double> cumulative_;     // zipf: cumulative weights of popularity ranks 0..E-1
};

}  // namespace deepinfer
