// DeepSeek-V4.1's cache on the device, in the formats its numerics imply, per layer and token slot (physical block
// * 64 + offset, through the engine's block tables, so prefixes stay shareable as for every model):
//  - the window K=V as FP8 bytes: e4m3 codes [slots, head_dim] and a ue8m0 scale byte per 32 values
//    [slots, head_dim / 32] (kernels/cuda/kv_cache.cuh's write_fp8_kv_rows: the CPU model's fake_quant_fp8 values);
//  - on KV sources only, the compressor's inputs [slots, width] in bf16 (width head_dim at ratio 1, kv and gate
//    2 x head_dim above), from which the compressed entries are pooled, and those entries themselves once their
//    group is complete, with the indexer keys on the sources that own them, as the FP4 bytes the reference's
//    fake_quant_fp4 implies (kernels/cuda/kv_cache.cuh: entries e2m1 with an e4m3 scale per 16, keys with a ue8m0
//    one per 32), paged per group (kernels/group_slots.h) through the same block tables: a step computes only the
//    groups it completes.
// So a layer that only attends holds head_dim x 1.03 bytes a token (the CPU entry holds 3 x head_dim floats).
// Transfers (export/import: the prefill-to-decode handoff) carry the CPU model's entry [K=V | kv | gate] in fp32,
// entry_dim values a token and layer, as the other backends do; imported blocks are marked as lacking their
// groups, which the model's next step over them rebuilds from the inputs (groups_missing).
#pragma once

#include <cuda_bf16.h>

#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/kv_cache.cuh"
#include "src/core/device_array.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

class CudaV41KvCache final : public KvCache {
 public:
  // What a layer caches beyond its window: the compressor inputs a token (0: none), and on a KV source its
  // compressed entries' ratio and indexer key width (0: it owns none).
  struct LayerSpec {
    int64_t input_width = 0, ratio = 0, key_dim = 0;
  };
  struct Layer {
    uint8_t* codes = nullptr;          // [slots, head_dim]
    uint8_t* scales = nullptr;         // [slots, head_dim / 32]
    __nv_bfloat16* inputs = nullptr;   // [slots, input_width], or null
    int64_t input_width = 0;
    uint8_t* entry_codes = nullptr;   // [group slots, head_dim / 2] on KV sources (kEntryFormat)
    uint8_t* entry_scales = nullptr;  // [group slots, head_dim / 16]
    uint8_t* key_codes = nullptr;     // [group slots, key_dim / 2] on the sources that own indexer keys (kKeyFormat)
    uint8_t* key_scales = nullptr;    // [group slots, key_dim / 32]
  };
  static constexpr cuda::Fp4Format kEntryFormat{16, true}, kKeyFormat{32, false};
  // head_dim a multiple of 32.
  CudaV41KvCache(int64_t num_blocks, int64_t head_dim, std::vector<LayerSpec> specs);

  // Device bytes a token takes over every layer.
  static size_t bytes_per_token(int64_t head_dim, const std::vector<LayerSpec>& specs);

  int64_t num_blocks() const override { return num_blocks_; }
  int64_t num_layers() const override { return static_cast<int64_t>(layers_.size()); }
  int64_t entry_dim() const override { return entry_dim_; }
  size_t bytes() const override { return storage_.size(); }
  void export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const override;
  void import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) override;
  void fill_random(uint64_t seed) override;

  const Layer& layer(int64_t l) const { return layers_[l]; }
  // Whether a block among the first `tokens` tokens' of a table came by import_entries without its groups; and
  // the mark cleared (the step that rebuilds them calls it).
  bool groups_missing(std::span<const int32_t> block_table, int64_t tokens) const;
  void set_groups_built(std::span<const int32_t> block_table, int64_t tokens);

 private:
  int64_t num_blocks_;
  int64_t head_dim_;
  int64_t entry_dim_;  // head_dim + the widest input width
  DeviceArray<uint8_t> storage_;
  std::vector<Layer> layers_;
  std::vector<uint8_t> groups_missing_;  // per block
  std::vector<int64_t> num_group_slots_, key_dims_;  // per layer
};

}  // namespace deepinfer
