#include "src/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/core/random.h"

namespace deepinfer {

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, int64_t position,
                     std::vector<float>& scratch) {
  if (params.temperature <= 0.0f) {
    // Greedy: the first maximum, as torch.argmax.
    return static_cast<int32_t>(std::max_element(logits, logits + vocab_size) - logits);
  }
  std::vector<int32_t> order(vocab_size);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t kept = params.top_k > 0 ? std::min(params.top_k, vocab_size) : vocab_size;

  scratch.resize(kept);
  const float max_logit = logits[order[0]];
  float sum = 0.0f;
  for (int64_t i = 0; i < kept; ++i) sum += scratch[i] = std::exp((logits[order[i]] - max_logit) / params.temperature);
  // Nucleus: the smallest prefix whose probability reaches top_p (at least one token).
  if (params.top_p < 1.0f) {
    float cumulative = 0.0f;
    for (int64_t i = 0; i < kept; ++i) {
      cumulative += scratch[i] / sum;
      if (cumulative >= params.top_p) {
        kept = i + 1;
        break;
      }
    }
    sum = std::accumulate(scratch.begin(), scratch.begin() + kept, 0.0f);
  }
  const float target = philox_uniform(params.seed, static_cast<uint64_t>(position)) * sum;
  float cumulative = 0.0f;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += scratch[i];
    if (target < cumulative) return order[i];
  }
  return order[kept - 1];
}

}  // namespace deepinfer
