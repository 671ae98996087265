#include "src/model/mla_kv_cache.h"

namespace deepinfer {

MlaKvCache::MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t latent_dim, int64_t rope_dim)
    : num_layers_(num_layers), num_blocks_(num_blocks), latent_dim_(latent_dim), rope_dim_(rope_dim),
      storage_(static_cast<size_t>(num_layers * num_blocks * kBlockSize * (latent_dim + rope_dim)), 0.0f) {}

}  // namespace deepinfer
