// Counter-based random numbers: the value at (key, index) depends on nothing else, so CPU and GPU, and any
// split of the work across ranks, produce the same numbers.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace deepinfer {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : text) hash = (hash ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return hash;
}

// Uniform in (0, 1).
inline double uniform_at(uint64_t key, uint64_t index) {
  return (static_cast<double>(splitmix64(key ^ splitmix64(index)) >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal (Box-Muller over two uniforms).
inline float normal_at(uint64_t key, uint64_t index) {
  const double u1 = uniform_at(key, 2 * index);
  const double u2 = uniform_at(key, 2 * index + 1);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Philox4x32-10 (Salmon et al., SC'11), as cuRAND and PyTorch use it: 4 x 32-bit outputs per counter.
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u, kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * counter[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// One uniform in [0, 1) for (seed, offset): a per-request stream indexed by the token position.
inline float philox_uniform(uint64_t seed, uint64_t offset) {
  const auto out = philox4x32({static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), 0, 0},
                              {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(out[0] >> 8) * 0x1.0p-24f;
}

}  // namespace deepinfer
