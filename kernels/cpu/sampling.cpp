#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/logits_hash.h"
#include "kernels/philox.h"

namespace deepinfer::cpu {

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, float* probability) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    const int64_t best = std::max_element(row, row + vocab) - row;  // the first maximum
    out[r] = static_cast<int32_t>(best);
    if (probability == nullptr) continue;
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - row[best]);
    probability[r] = static_cast<float>(1.0 / sum);
  }
}

void apply_token_bitmask(float* logits, int64_t rows, int64_t vocab, const uint32_t* masks, int64_t words,
                         const uint8_t* masked) {
  for (int64_t r = 0; r < rows; ++r) {
    if (masked[r] == 0) continue;
    const uint32_t* mask = masks + r * words;
    for (int64_t v = 0; v < vocab; ++v)
      if (((mask[v / 32] >> (v % 32)) & 1u) == 0) logits[r * vocab + v] = -std::numeric_limits<float>::infinity();
  }
}

namespace {

int32_t sample_row(const float* logits, int64_t vocab, const SamplingRow& p, std::vector<int32_t>& order,
                   std::vector<float>& mass) {
  if (p.temperature <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t kept = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
  mass.resize(kept);
  const float max_logit = logits[order[0]];
  float sum = 0.0f;
  for (int64_t i = 0; i < kept; ++i) sum += mass[i] = std::exp((logits[order[i]] - max_logit) / p.temperature);
  // Nucleus: the smallest prefix whose probability reaches top_p (at least one token).
  if (p.top_p < 1.0f) {
    float cumulative = 0.0f;
    for (int64_t i = 0; i < kept; ++i) {
      cumulative += mass[i] / sum;
      if (cumulative >= p.top_p) {
        kept = i + 1;
        break;
      }
    }
    sum = std::accumulate(mass.begin(), mass.begin() + kept, 0.0f);
  }
  const float target = philox_uniform(p.seed, static_cast<uint64_t>(p.position)) * sum;
  float cumulative = 0.0f;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += mass[i];
    if (target < cumulative) return order[i];
  }
  return order[kept - 1];
}

}  // namespace

void sample_rows(const float* logits, int64_t rows, int64_t vocab, const SamplingRow* params, int32_t* out) {
  std::vector<int32_t> order;
  std::vector<float> mass;
  for (int64_t r = 0; r < rows; ++r) out[r] = sample_row(logits + r * vocab, vocab, params[r], order, mass);
}

void scatter_sampled_tokens(const int32_t* sampled, const int32_t* targets, int64_t count, int32_t* token_ids) {
  for (int64_t i = 0; i < count; ++i) token_ids[targets[2 * i]] = sampled[targets[2 * i + 1]];
}

void logits_row_hashes(const float* logits, int64_t rows, int64_t vocab, uint64_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t sum = 0;
    for (int64_t v = 0; v < vocab; ++v)
      sum += logits_hash_term(static_cast<uint64_t>(v), std::bit_cast<uint32_t>(logits[r * vocab + v]));
    out[r] = sum;
  }
}

}  // namespace deepinfer::cpu
