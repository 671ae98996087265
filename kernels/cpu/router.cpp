#include "kernels/cpu/router.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace deepinfer::cpu {

namespace {

// Index of the largest value among `n` not yet taken (taken[i] != 0); ties to the lowest index.
int64_t argmax_untaken(const float* values, const uint8_t* taken, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!taken[i] && (best < 0 || values[i] > values[best])) best = i;
  return best;
}

}  // namespace

void route_topk(const float* logits, int64_t num_tokens, const RouterParams& p, int32_t* topk_ids,
                float* topk_weights, float* scratch) {
  const int64_t E = p.num_experts;
  const int64_t per_group = E / p.num_groups;
  float* scores = scratch;            // [E] the combine-weight scores
  float* choice = scratch + E;        // [E] the selection scores
  float* group_scores = scratch + 2 * E;  // [num_groups]
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  uint8_t taken[RouterParams::kMaxExperts];
  uint8_t group_taken[RouterParams::kMaxGroups];

  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * E;
    for (int64_t e = 0; e < E; ++e) scores[e] = row[e] / p.temperature;
    if (p.scoring == RouterParams::Scoring::kSoftmax) {
      float max_value = scores[0];
      for (int64_t e = 1; e < E; ++e) max_value = std::max(max_value, scores[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) sum += scores[e] = std::exp(scores[e] - max_value);
      for (int64_t e = 0; e < E; ++e) scores[e] /= sum;
    } else if (p.scoring == RouterParams::Scoring::kSigmoid) {
      for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-scores[e]));
    } else {  // torch's softplus (beta 1, threshold 20), then the square root
      for (int64_t e = 0; e < E; ++e)
        scores[e] = std::sqrt(scores[e] > 20.0f ? scores[e] : std::log1p(std::exp(scores[e])));
    }
    for (int64_t e = 0; e < E; ++e) choice[e] = scores[e] + (p.correction_bias ? p.correction_bias[e] : 0.0f);

    if (p.group_score != RouterParams::GroupScore::kNone && p.topk_groups < p.num_groups) {
      for (int64_t g = 0; g < p.num_groups; ++g) {
        const float* group = choice + g * per_group;
        float first = kNegInf, second = kNegInf;
        for (int64_t i = 0; i < per_group; ++i) {
          if (group[i] > first) second = first, first = group[i];
          else if (group[i] > second) second = group[i];
        }
        group_scores[g] = p.group_score == RouterParams::GroupScore::kMax ? first : first + second;
        group_taken[g] = 0;
      }
      for (int64_t k = 0; k < p.topk_groups; ++k) {
        const int64_t g = argmax_untaken(group_scores, group_taken, p.num_groups);
        if (g >= 0) group_taken[g] = 1;  // g < 0 only if topk_groups > num_groups, which configs reject
      }
      // Experts of unselected groups cannot be chosen: V3 masks them to -inf, V2 to 0 (scores are >= 0).
      const float masked = p.scoring == RouterParams::Scoring::kSoftmax ? 0.0f : kNegInf;
      for (int64_t e = 0; e < E; ++e)
        if (!group_taken[e / per_group]) choice[e] = masked;
    }

    for (int64_t e = 0; e < E; ++e) taken[e] = 0;
    float sum = 0.0f;
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int64_t e = std::max<int64_t>(argmax_untaken(choice, taken, E), 0);  // top_k <= E: never -1
      taken[e] = 1;
      topk_ids[t * p.top_k + k] = static_cast<int32_t>(e);
      topk_weights[t * p.top_k + k] = scores[e];
      sum += scores[e];
    }
    const float norm = p.normalize ? 1.0f / (sum + 1e-20f) : 1.0f;
    for (int64_t k = 0; k < p.top_k; ++k) topk_weights[t * p.top_k + k] *= norm * p.scaling;
  }
}

}  // namespace deepinfer::cpu
