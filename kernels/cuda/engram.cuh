// DeepSeek-V4.1's engram block on the GPU (the CPU forms, same names: kernels/cpu/engram.h). The table rows are
// gathered with `embedding` (a row gather: ids = the step's hashed rows) from GPU memory or from pinned host memory
// mapped into the device's address space (the kernel reads it over PCIe), then projected by wkv (a Linear, fp32
// out), then
//   engram_mix   one block per (token, stream): the stream's and key's mean squares and the gated dot product in
//                fp32 block sums, then streams[t, j] += gate * value[t] in place (streams fp32 [T, hc, H]).
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>

namespace deepinfer::cuda {

void engram_mix(float* streams, const float* kv, const float* q_weight, const float* k_weight, int64_t tokens,
                int64_t hc, int64_t hidden, float eps, cudaStream_t stream);

// The engram hash (src/model/engram_hash.h's, bit for bit) on the device, for steps whose input tokens are written
// there (overlapped scheduling: a token sampled by the step in flight, a chained draft's). sources [T, max_ngram]:
// row t's tokens at positions p, p - 1, ..., p - max_ngram + 1: a token id (>= 0), kEngramFreshRow - r for the step's
// row r (token_ids[r], on the device), or kEngramPad before the sequence's start. Out: rows [layers, T, columns],
// columns = (max_ngram - 1) * heads, each the hash of the order's n-gram modulo its prime plus its offset.
// compressed_ids [vocab]; multipliers [layers, max_ngram]; primes and offsets [layers, columns].
inline constexpr int32_t kEngramPad = INT32_MIN;
inline constexpr int32_t kEngramFreshRow = -1;  // - r: the step's row r
void engram_hash_rows(const int32_t* token_ids, const int32_t* sources, const int32_t* compressed_ids,
                      int64_t pad_compressed_id, const int64_t* multipliers, const int64_t* primes,
                      const int64_t* offsets, int64_t tokens, int64_t layers, int64_t max_ngram, int64_t heads,
                      int32_t* rows, cudaStream_t stream);

}  // namespace deepinfer::cuda
