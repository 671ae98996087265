// Sampling from fp32 logits [rows, vocab]:
//   argmax_rows: greedy (ties to the lowest index, as torch.argmax); with `probability` (may be null) each row's
//     softmax probability of that token (a drafter's confidence), as the CPU form.
//   sample_rows: per row, greedy when temperature <= 0; otherwise the CPU form's rule (kernels/cpu/sampling.h):
//     sort descending (stable), keep top_k (0: all), p_i ~ exp((l_i - l_max) / temperature), keep the smallest
//     prefix whose mass reaches top_p, and pick the first token whose cumulative mass exceeds u * mass with
//     u = philox_uniform(seed, position) (kernels/philox.h): the same per-request stream as the CPU.
// Workspace: sample_workspace_bytes(rows, vocab) bytes from the caller.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

struct SamplingRow {
  float temperature;
  float top_p;
  int64_t top_k;
  uint64_t seed;
  int64_t position;
};

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, float* probability,
                 cudaStream_t stream);
// Structured output's vocabulary masks (the CPU form's rule, kernels/cpu/sampling.h), in place on the device.
void apply_token_bitmask(float* logits, int64_t rows, int64_t vocab, const uint32_t* masks, int64_t words,
                         const uint8_t* masked, cudaStream_t stream);

// out[r]: the row's fingerprint, the CPU form's (kernels/cpu/sampling.h, kernels/logits_hash.h) for equal bits.
void logits_row_hashes(const float* logits, int64_t rows, int64_t vocab, uint64_t* out, cudaStream_t stream);

// Overlapped scheduling: the inputs of a step started before its predecessor's tokens reached the host take them
// on the device, token_ids[targets[2 i]] = sampled[targets[2 i + 1]] for i < count (the CPU form's rule).
void scatter_sampled_tokens(const int32_t* sampled, const int32_t* targets, int64_t count, int32_t* token_ids,
                            cudaStream_t stream);

size_t sample_workspace_bytes(int64_t rows, int64_t vocab);
void sample_rows(const float* logits, int64_t rows, int64_t vocab, const SamplingRow* params, int32_t* out,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace deepinfer::cuda
