#include "src/model/v41/cuda/cuda_v41_kv_cache.h"

#include <algorithm>
#include <numeric>

#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/group_slots.h"
#include "src/core/random.h"
#include "src/model/cuda/cuda_kv_cache.h"

namespace deepinfer {

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int64_t group_slots(int64_t num_blocks, int64_t ratio) {
  return ratio > 0 ? num_blocks * group_slots_per_block(ratio) : 0;
}

}  // namespace

size_t CudaV41KvCache::bytes_per_token(int64_t head_dim, const std::vector<LayerSpec>& specs) {
  size_t bytes = 0;
  for (const LayerSpec& spec : specs) {
    bytes += head_dim + head_dim / 32 + spec.input_width * 2;
    if (spec.ratio > 0)  // a block's group slots over its 64 tokens, FP4 codes and their scale bytes
      bytes += group_slots_per_block(spec.ratio) *
               (head_dim / 2 + head_dim / kEntryFormat.block + spec.key_dim / 2 + spec.key_dim / kKeyFormat.block) /
               kBlockSize;
  }
  return bytes;
}

CudaV41KvCache::CudaV41KvCache(int64_t num_blocks, int64_t head_dim, std::vector<LayerSpec> specs)
    : num_blocks_(num_blocks), head_dim_(head_dim), groups_missing_(num_blocks, 0) {
  DI_CHECK(head_dim % 32 == 0, "the FP8 window cache needs head_dim a multiple of 32 (one scale per 32), not {}",
           head_dim);
  for (const LayerSpec& spec : specs)
    DI_CHECK(spec.key_dim % kKeyFormat.block == 0, "FP4 indexer keys need key_dim a multiple of {}, not {}",
             kKeyFormat.block, spec.key_dim);
  const int64_t slots = num_blocks * kBlockSize;
  int64_t widest = 0;
  for (const LayerSpec& spec : specs) widest = std::max(widest, spec.input_width);
  entry_dim_ = head_dim + widest;
  // Each layer's regions, aligned: codes, scales, inputs, entry codes and scales, key codes and scales.
  auto regions = [&](const LayerSpec& spec) -> std::vector<size_t> {
    const int64_t groups = group_slots(num_blocks, spec.ratio);
    return {aligned(slots * head_dim),
            aligned(slots * head_dim / 32),
            aligned(slots * spec.input_width * 2),
            aligned(groups * head_dim / 2),
            aligned(groups * head_dim / kEntryFormat.block),
            aligned(groups * spec.key_dim / 2),
            aligned(groups * spec.key_dim / kKeyFormat.block)};
  };
  size_t total = 0;
  for (const LayerSpec& spec : specs)
    for (size_t bytes : regions(spec)) total += bytes;
  storage_ = DeviceArray<uint8_t>(total);
  uint8_t* next = storage_.data();
  for (const LayerSpec& spec : specs) {
    const std::vector<size_t> sizes = regions(spec);
    uint8_t* region[7];
    for (int i = 0; i < 7; ++i) region[i] = next, next += sizes[i];
    Layer layer;
    layer.codes = region[0];
    layer.scales = region[1];
    layer.input_width = spec.input_width;
    if (spec.input_width > 0) layer.inputs = reinterpret_cast<__nv_bfloat16*>(region[2]);
    if (spec.ratio > 0) layer.entry_codes = region[3], layer.entry_scales = region[4];
    if (spec.ratio > 0 && spec.key_dim > 0) layer.key_codes = region[5], layer.key_scales = region[6];
    layers_.push_back(layer);
    num_group_slots_.push_back(group_slots(num_blocks, spec.ratio));
    key_dims_.push_back(spec.key_dim);
  }
}

bool CudaV41KvCache::groups_missing(std::span<const int32_t> block_table, int64_t tokens) const {
  const int64_t blocks = std::min<int64_t>((tokens + kBlockSize - 1) / kBlockSize, block_table.size());
  for (int64_t b = 0; b < blocks; ++b)
    if (groups_missing_[block_table[b]] != 0) return true;
  return false;
}

void CudaV41KvCache::set_groups_built(std::span<const int32_t> block_table, int64_t tokens) {
  const int64_t blocks = std::min<int64_t>((tokens + kBlockSize - 1) / kBlockSize, block_table.size());
  for (int64_t b = 0; b < blocks; ++b) groups_missing_[block_table[b]] = 0;
}

void CudaV41KvCache::export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const {
  const auto slots = DeviceArray<int64_t>::from_host(slots_of(block_table, 0, count));
  DeviceArray<__nv_bfloat16> window(std::max<int64_t>(count, 1) * head_dim_);
  std::vector<float> entry(count * entry_dim_);
  for (const Layer& layer : layers_) {
    std::fill(entry.begin(), entry.end(), 0.0f);
    cuda::gather_fp8_kv_rows(layer.codes, layer.scales, slots.data(), count, head_dim_, window.data(), head_dim_,
                             nullptr);
    DI_CUDA_CHECK(cudaGetLastError());
    const std::vector<__nv_bfloat16> kv = window.to_host();
    for (int64_t t = 0; t < count; ++t)
      for (int64_t i = 0; i < head_dim_; ++i) entry[t * entry_dim_ + i] = __bfloat162float(kv[t * head_dim_ + i]);
    if (layer.inputs != nullptr) {
      DeviceArray<__nv_bfloat16> inputs(std::max<int64_t>(count, 1) * layer.input_width);
      cuda::gather_kv_entries(layer.inputs, slots.data(), count, layer.input_width, inputs.data(), nullptr);
      DI_CUDA_CHECK(cudaGetLastError());
      const std::vector<__nv_bfloat16> host = inputs.to_host();
      for (int64_t t = 0; t < count; ++t)
        for (int64_t i = 0; i < layer.input_width; ++i)
          entry[t * entry_dim_ + head_dim_ + i] = __bfloat162float(host[t * layer.input_width + i]);
    }
    dst = std::copy(entry.begin(), entry.end(), dst);
  }
}

void CudaV41KvCache::import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) {
  const auto slots = DeviceArray<int64_t>::from_host(slots_of(block_table, 0, count));
  std::vector<__nv_bfloat16> host(count * entry_dim_);
  DeviceArray<__nv_bfloat16> staged(std::max<int64_t>(count, 1) * entry_dim_);
  for (const Layer& layer : layers_) {
    for (__nv_bfloat16& value : host) value = __float2bfloat16(*src++);
    if (count == 0) continue;
    DI_CUDA_CHECK(cudaMemcpy(staged.data(), host.data(), host.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    // The K=V values are FP8 values already (the exporting cache's): quantising them again gives their codes.
    cuda::write_fp8_kv_rows(staged.data(), entry_dim_, slots.data(), count, head_dim_, layer.codes, layer.scales,
                            nullptr);
    if (layer.inputs != nullptr)
      cuda::write_kv_entries(staged.data() + head_dim_, entry_dim_, slots.data(), count, layer.input_width,
                             layer.inputs, layer.input_width, nullptr);
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // `host` is refilled for the next layer
  }
  // The compressed entries are not carried: the next step over these blocks pools them from the inputs again.
  const int64_t blocks = std::min<int64_t>((count + kBlockSize - 1) / kBlockSize, block_table.size());
  for (int64_t b = 0; b < blocks; ++b) groups_missing_[block_table[b]] = 1;
}

void CudaV41KvCache::fill_random(uint64_t seed) {
  // Random K=V rows quantised into the window cache (random bytes would hold NaN codes), random inputs, in chunks.
  constexpr int64_t kChunk = 16384;
  const int64_t slots = num_blocks_ * kBlockSize;
  DeviceArray<__nv_bfloat16> values(std::min(slots, kChunk) * head_dim_);
  DeviceArray<int64_t> chunk_slots(std::min(slots, kChunk));
  std::vector<int64_t> host_slots(chunk_slots.size());
  uint64_t key = splitmix64(seed);
  for (const Layer& layer : layers_) {
    for (int64_t first = 0; first < slots; first += kChunk) {
      const int64_t n = std::min(kChunk, slots - first);
      std::iota(host_slots.begin(), host_slots.begin() + n, first);
      DI_CUDA_CHECK(cudaMemcpy(chunk_slots.data(), host_slots.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
      cuda::fill_dummy_bf16(values.data(), n * head_dim_, key = splitmix64(key), 1.0f, 0.0f, nullptr);
      cuda::write_fp8_kv_rows(values.data(), head_dim_, chunk_slots.data(), n, head_dim_, layer.codes, layer.scales,
                              nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
    }
    if (layer.inputs != nullptr)
      cuda::fill_dummy_bf16(layer.inputs, slots * layer.input_width, key = splitmix64(key), 1.0f, 0.0f, nullptr);
    // Groups: random codes (any byte is two FP4 values) under a scale of 1/8 (e4m3 code 0x20, ue8m0 byte 124).
    const int64_t groups = num_group_slots_[&layer - layers_.data()];
    if (layer.entry_codes != nullptr) {
      cuda::fill_dummy_bf16(reinterpret_cast<__nv_bfloat16*>(layer.entry_codes), groups * head_dim_ / 4,
                            key = splitmix64(key), 1.0f, 0.0f, nullptr);
      DI_CUDA_CHECK(cudaMemset(layer.entry_scales, 0x20, groups * head_dim_ / kEntryFormat.block));
    }
    if (layer.key_codes != nullptr) {
      const int64_t key_dim = key_dims_[&layer - layers_.data()];
      cuda::fill_dummy_bf16(reinterpret_cast<__nv_bfloat16*>(layer.key_codes), groups * key_dim / 4,
                            key = splitmix64(key), 1.0f, 0.0f, nullptr);
      DI_CUDA_CHECK(cudaMemset(layer.key_scales, 124, groups * key_dim / kKeyFormat.block));
    }
  }
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace deepinfer
