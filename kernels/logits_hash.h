// A logits row's fingerprint for bit-level comparisons (--logits-hashes, issue #28): the sum, modulo 2^64, of a
// mix of each entry's index and fp32 bit pattern. A sum commutes, so a kernel may add the terms in any order and
// still give the CPU's value; one flipped bit anywhere in the row changes it (with probability 1 - 2^-64).
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace deepinfer {

DEEPINFER_HOST_DEVICE inline uint64_t logits_hash_term(uint64_t index, uint32_t bits) {
  uint64_t x = (index << 32 | bits) + 0x9e3779b97f4a7c15ull;  // splitmix64's finaliser (src/core/random.h)
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace deepinfer
