// Counter-based random numbers: the value at (key, index) depends on nothing else, so CPU and GPU, and any
// split of the work across ranks, produce the same numbers.
#pragma once

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

}  // namespace deepinfer
