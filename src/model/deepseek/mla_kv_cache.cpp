#include "src/model/deepseek/mla_kv_cache.h"

#include <algorithm>

#include "src/core/random.h"

namespace deepinfer {

MlaKvCache::MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t latent_dim, int64_t rope_dim)
    : num_layers_(num_layers), num_blocks_(num_blocks), latent_dim_(latent_dim), rope_dim_(rope_dim),
      storage_(static_cast<size_t>(num_layers * num_blocks * kBlockSize * (latent_dim + rope_dim)), 0.0f) {}

void MlaKvCache::export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const {
  for (int64_t layer = 0; layer < num_layers_; ++layer)
    for (int64_t pos = 0; pos < count; ++pos, dst += entry_dim())
      std::copy_n(entry(layer, block_table, pos), entry_dim(), dst);
}

void MlaKvCache::fill_random(uint64_t seed) {
  const uint64_t key = splitmix64(seed);
  const auto n = static_cast<int64_t>(storage_.size());
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) storage_[i] = normal_at(key, static_cast<uint64_t>(i));
}

void MlaKvCache::import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) {
  for (int64_t layer = 0; layer < num_layers_; ++layer)
    for (int64_t pos = 0; pos < count; ++pos, src += entry_dim())
      std::copy_n(src, entry_dim(), entry(layer, block_table, pos));
}

}  // namespace deepinfer
