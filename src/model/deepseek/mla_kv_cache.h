// The paged KV cache of MLA: per token and layer one entry of kv_lora_rank latent floats followed by the
// qk_rope_head_dim RoPE key (the layout FlashMLA reads, 512 + 64 at DeepSeek's shapes), in blocks of 64
// tokens. A sequence's block table maps its logical block i (positions [64 i, 64 i + 64)) to a physical
// block; one physical block serves every layer. Which blocks a sequence owns is the engine's business.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/core/check.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

class MlaKvCache final : public KvCache {
 public:
  MlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t latent_dim, int64_t rope_dim);

  int64_t num_blocks() const override { return num_blocks_; }
  int64_t num_layers() const override { return num_layers_; }
  int64_t entry_dim() const override { return latent_dim_ + rope_dim_; }
  size_t bytes() const override { return storage_.size() * sizeof(float); }
  int64_t latent_dim() const { return latent_dim_; }
  void export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const override;
  void import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) override;
  void fill_random(uint64_t seed) override;

  // Layer `layer`'s entries, [num_blocks * kBlockSize, entry_dim], physical block b at row b * kBlockSize.
  const float* layer_entries(int64_t layer) const {
    return storage_.data() + static_cast<size_t>(layer * num_blocks_ * kBlockSize * entry_dim());
  }
  float* entry(int64_t layer, std::span<const int32_t> block_table, int64_t position) {
    return storage_.data() + offset(layer, block_table, position);
  }
  const float* entry(int64_t layer, std::span<const int32_t> block_table, int64_t position) const {
    return storage_.data() + offset(layer, block_table, position);
  }

 private:
  size_t offset(int64_t layer, std::span<const int32_t> block_table, int64_t position) const {
    const int64_t logical = position / kBlockSize;
    DI_CHECK(logical < static_cast<int64_t>(block_table.size()), "position {} beyond the {} blocks of its table",
             position, block_table.size());
    const int64_t block = block_table[logical];
    DI_CHECK(block >= 0 && block < num_blocks_, "physical block {} out of [0, {})", block, num_blocks_);
    return static_cast<size_t>(((layer * num_blocks_ + block) * kBlockSize + position % kBlockSize) * entry_dim());
  }

  int64_t num_layers_;
  int64_t num_blocks_;
  int64_t latent_dim_;
  int64_t rope_dim_;
  std::vector<float> storage_;
};

}  // namespace deepinfer
