// DeepSeek-V4.1's engram block on the GPU (the CPU forms, same names: kernels/cpu/engram.h). The table rows are
// gathered with `embedding` (a row gather: ids = the step's hashed rows) from GPU memory or from pinned host memory
// mapped into the device's address space (the kernel reads it over PCIe), then projected by wkv (a Linear, fp32
// out), then
//   engram_mix   one block per (token, stream): the stream's and key's mean squares and the gated dot product in
//                fp32 block sums, then streams[t, j] += gate * value[t] in place (streams fp32 [T, hc, H]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/engram_hash_row.h"

namespace deepinfer::cuda {

void engram_mix(float* streams, const float* kv, const float* q_weight, const float* k_weight, int64_t tokens,
                int64_t hc, int64_t hidden, float eps, cudaStream_t stream);

// The engram hash (kernels/engram_hash_row.h, as the host's engram_rows) on the device, a thread a token, for steps
// whose input tokens are written there (overlapped scheduling: a token sampled by the step in flight, a chained
// draft's): rows [layers, T, columns] from sources [T, max_ngram] and the step's token_ids [T].
void engram_hash_rows(const int32_t* token_ids, const int32_t* sources, const int32_t* compressed_ids,
                      int64_t pad_compressed_id, const int64_t* multipliers, const int64_t* primes,
                      const int64_t* offsets, int64_t tokens, int64_t layers, int64_t max_ngram, int64_t heads,
                      int32_t* rows, cudaStream_t stream);

}  // namespace deepinfer::cuda
