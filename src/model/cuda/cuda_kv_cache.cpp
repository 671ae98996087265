#include "src/model/cuda/cuda_kv_cache.h"

#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "src/core/random.h"

namespace deepinfer {

std::vector<int64_t> slots_of(std::span<const int32_t> block_table, int64_t begin, int64_t count) {
  std::vector<int64_t> slots(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = begin + i;
    DI_CHECK(pos / KvCache::kBlockSize < static_cast<int64_t>(block_table.size()),
             "position {} beyond the {} blocks of its table", pos, block_table.size());
    slots[i] = block_table[pos / KvCache::kBlockSize] * KvCache::kBlockSize + pos % KvCache::kBlockSize;
  }
  return slots;
}

CudaMlaKvCache::CudaMlaKvCache(int64_t num_layers, int64_t num_blocks, int64_t entry_dim)
    : num_layers_(num_layers), num_blocks_(num_blocks), entry_dim_(entry_dim),
      storage_(static_cast<size_t>(num_layers * num_blocks * kBlockSize * entry_dim)) {}

void CudaMlaKvCache::export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const {
  const auto slots = DeviceArray<int64_t>::from_host(slots_of(block_table, 0, count));
  DeviceArray<uint16_t> gathered(count * entry_dim_);
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    const auto* cache = reinterpret_cast<const __nv_bfloat16*>(storage_.data() + layer * num_blocks_ * kBlockSize * entry_dim_);
    cuda::gather_kv_entries(cache, slots.data(), count, entry_dim_, reinterpret_cast<__nv_bfloat16*>(gathered.data()), nullptr);
    DI_CUDA_CHECK(cudaGetLastError());
    for (uint16_t bits : gathered.to_host()) *dst++ = bf16_to_float(bits);
  }
}

void CudaMlaKvCache::fill_random(uint64_t seed) {
  cuda::fill_dummy_bf16(reinterpret_cast<__nv_bfloat16*>(storage_.data()), static_cast<int64_t>(storage_.size()),
                        splitmix64(seed), 1.0f, 0.0f, nullptr);
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaMlaKvCache::import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) {
  const auto slots = DeviceArray<int64_t>::from_host(slots_of(block_table, 0, count));
  std::vector<uint16_t> host(count * entry_dim_);
  DeviceArray<uint16_t> staged(count * entry_dim_);
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    for (uint16_t& bits : host) bits = float_to_bf16(*src++);
    staged.copy_from(host);
    cuda::write_kv_entries(reinterpret_cast<const __nv_bfloat16*>(staged.data()), entry_dim_, slots.data(), count,
                           entry_dim_, static_cast<__nv_bfloat16*>(layer_data(layer)), entry_dim_, nullptr);
    DI_CUDA_CHECK(cudaGetLastError());
  }
  DI_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace deepinfer
