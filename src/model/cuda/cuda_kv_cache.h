// The MLA latent cache on the device: bf16 entries [layer][num_blocks * 64][kv_lora_rank + qk_rope_head_dim].
#pragma once

#include "src/core/device_array.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

class CudaMlaKvCache final : public KvCache {
 public:
  CudaMlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t entry_dim);

  int64_t num_blocks() const override { return num_blocks_; }
  int64_t num_layers() const override { return num_layers_; }
  int64_t entry_dim() const override { return entry_dim_; }
  size_t bytes() const override { return storage_.size() * sizeof(uint16_t); }
  void export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const override;
  void import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) override;
  void fill_random(uint64_t seed) override;

  // Layer `layer`'s [num_blocks * 64, entry_dim] slots.
  void* layer_data(int64_t layer) { return storage_.data() + layer * num_blocks_ * kBlockSize * entry_dim_; }

 private:
  int64_t num_layers_;
  int64_t num_blocks_;
  int64_t entry_dim_;
  DeviceArray<uint16_t> storage_;
};

// Flat slots (block * 64 + offset) of positions [begin, begin + count) through a block table.
std::vector<int64_t> slots_of(std::span<const int32_t> block_table, int64_t begin, int64_t count);

}  // namespace deepinfer
