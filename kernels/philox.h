// Philox4x32-10 (Salmon et al., SC'11), as cuRAND and PyTorch use it, for the host and the device alike: one
// definition, so the CPU and CUDA samplers draw bit-identical uniforms for a request's (seed, position).
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace deepinfer {

// One uniform in [0, 1) for (seed, offset): the first of Philox's four outputs at counter (offset, 0) under
// key seed, its top 24 bits.
DEEPINFER_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset) {
  uint32_t c0 = static_cast<uint32_t>(offset), c1 = static_cast<uint32_t>(offset >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1, n3 = static_cast<uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return static_cast<float>(c0 >> 8) * 0x1.0p-24f;
}

}  // namespace deepinfer
