// Sampling from fp32 logits [rows, vocab] on the CPU, the reference forms of kernels/cuda/sampling.cuh under the
// same names (less workspace and stream):
//   argmax_rows: greedy (ties to the lowest index, as torch.argmax); with `probability` (may be null) also each
//     row's softmax probability of that token, 1 / sum_i exp(l_i - l_max) (a drafter's confidence).
//   sample_rows: per row, greedy when temperature <= 0; otherwise sort descending (stable), keep top_k (0: all),
//     p_i ~ exp((l_i - l_max) / temperature), keep the smallest prefix whose mass reaches top_p, and pick the
//     first token whose cumulative mass exceeds u * mass, u = philox_uniform(seed, position) (kernels/philox.h).
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// One row's parameters; the layout of cuda::SamplingRow.
struct SamplingRow {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t position = 0;  // where the token will land: it indexes the request's random stream
};

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, float* probability = nullptr);
// Structured output's vocabulary masks: logits[r, v] = -inf where bit v % 32 of word v / 32 of row r's mask
// (masks + r * words) is 0, for the rows whose masked[r] is nonzero (others untouched).
void apply_token_bitmask(float* logits, int64_t rows, int64_t vocab, const uint32_t* masks, int64_t words,
                         const uint8_t* masked);
void sample_rows(const float* logits, int64_t rows, int64_t vocab, const SamplingRow* params, int32_t* out);
// token_ids[targets[2 i]] = sampled[targets[2 i + 1]] for i < count: a step's inputs taking the tokens its
// predecessor sampled (overlapped scheduling, where the tokens stay on the device).
void scatter_sampled_tokens(const int32_t* sampled, const int32_t* targets, int64_t count, int32_t* token_ids);
// out[r] = sum over v of logits_hash_term(v, bits of logits[r, v]) mod 2^64 (kernels/logits_hash.h).
void logits_row_hashes(const float* logits, int64_t rows, int64_t vocab, uint64_t* out);

}  // namespace deepinfer::cpu
