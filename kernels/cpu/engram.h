// DeepSeek-V4.1's engram block on the CPU, the reference forms of kernels/cuda/engram.cuh under the same names.
// For each new token the hash (src/model/engram_hash.h) names `columns` rows of the layer's table; then
//   1. gathered[t] = the rows, concatenated (engram_gather: columns * row_dim values);
//   2. kv[t] = wkv . gathered[t] ([(hc + 1) * H]: a key per stream, then one value), a Linear;
//   3. every stream j takes the value through its gate (engram_mix):
//        dot  = sum_d streams[t, j, d] q[j, d] k[j, d] key[t, j, d]
//               / (sqrt(mean streams[t, j]^2 + eps) sqrt(mean key[t, j]^2 + eps) sqrt(H))
//        gate = sigmoid(sign(dot) sqrt(max(|dot|, 1e-6)))
//        streams[t, j] += gate value[t]
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// gathered[t, c * row_dim + i] = table[rows[t * columns + c] * row_dim + i].
void engram_gather(const float* table, const int64_t* rows, int64_t tokens, int64_t columns, int64_t row_dim,
                   float* gathered);

// streams [T, hc, H] updated in place from kv [T, (hc + 1) * H] and the gate weights q, k [hc, H] (sums in double).
void engram_mix(float* streams, const float* kv, const float* q_weight, const float* k_weight, int64_t tokens,
                int64_t hc, int64_t hidden, float eps);

}  // namespace deepinfer::cpu
