// DeepSeek-V4.1's engram hash of one token, for the host (src/model/engram_hash.cpp's engram_rows) and the device
// (cuda::engram_hash_rows) alike, so that both give the same table rows bit for bit.
//
// A token's n-gram sources: its tokens at positions p, p - 1, ..., p - max_ngram + 1, each a token id (>= 0),
// kEngramFreshRow - r for row r of the step's own tokens (which the device may have written there: overlapped
// scheduling), or kEngramPad before the sequence's start (src/model/engram_hash.h's engram_hash_sources). The hash of
// the n-gram ending at p: the compressed ids times the layer's multipliers, XOR-ed; each (order, head) column takes
// it modulo its prime plus its bucket's offset.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/host_device.h"

namespace deepinfer {

inline constexpr int32_t kEngramPad = INT32_MIN;
inline constexpr int32_t kEngramFreshRow = -1;  // - r: the step's row r
inline constexpr int kEngramMaxNgram = 16;      // v41_config's bound on engram_max_ngram_size

// rows[(e * tokens + t) * columns + c] for every engram layer e and column c of token t; columns =
// (max_ngram - 1) * heads. sources [tokens, max_ngram]; token_ids [tokens]; compressed_ids [vocab]; multipliers
// [layers, max_ngram]; primes and offsets [layers, columns].
template <typename Row>
DEEPINFER_HOST_DEVICE inline void engram_hash_row(int64_t t, const int32_t* sources, const int32_t* token_ids,
                                                  const int32_t* compressed_ids, int64_t pad_compressed_id,
                                                  const int64_t* multipliers, const int64_t* primes,
                                                  const int64_t* offsets, int64_t tokens, int64_t layers,
                                                  int max_ngram, int64_t heads, Row* rows) {
  int64_t ids[kEngramMaxNgram];
  for (int k = 0; k < max_ngram; ++k) {
    const int32_t source = sources[t * max_ngram + k];
    ids[k] = source == kEngramPad ? pad_compressed_id
                                  : compressed_ids[source >= 0 ? source : token_ids[kEngramFreshRow - source]];
  }
  const int64_t cols = (max_ngram - 1) * heads;
  for (int64_t e = 0; e < layers; ++e) {
    const int64_t* m = multipliers + e * max_ngram;
    int64_t hash = ids[0] * m[0];
    for (int n = 1; n < max_ngram; ++n) {
      hash ^= ids[n] * m[n];  // the hash of the (n + 1)-gram ending at the token's position
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t c = (n - 1) * heads + h;
        rows[(e * tokens + t) * cols + c] = static_cast<Row>(hash % primes[e * cols + c] + offsets[e * cols + c]);
      }
    }
  }
}

}  // namespace deepinfer
