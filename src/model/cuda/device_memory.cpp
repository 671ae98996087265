#include "src/model/cuda/device_memory.h"

#include <algorithm>

namespace deepinfer {

void* DeviceArena::take(size_t bytes) {
  const ArenaPlan::Place place = plan_.take(bytes);
  if (place.new_block_bytes == 0) return blocks_[chunk_].data() + place.offset;
  blocks_.emplace_back(place.new_block_bytes);
  if (!place.own_block) chunk_ = blocks_.size() - 1;
  return blocks_.back().data() + place.offset;
}

void* ScratchPool::take(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  while (chunk_idx_ < chunks_.size() && offset_ + bytes > chunks_[chunk_idx_].size()) {
    ++chunk_idx_;
    offset_ = 0;
  }
  if (chunk_idx_ == chunks_.size()) {
    const size_t last = chunks_.empty() ? 0 : chunks_.back().size();
    chunks_.emplace_back(std::max({bytes, size_t{64} << 20, 2 * last}));
    offset_ = 0;
    grew_ = true;
  }
  void* ptr = chunks_[chunk_idx_].data() + offset_;
  offset_ += bytes;
  size_t end = offset_;
  for (size_t c = 0; c < chunk_idx_; ++c) end += chunks_[c].size();
  peak_ = std::max(peak_, end);
  return ptr;
}

void* ScratchPool::stage(size_t bytes) {
  Staging& half = staging_[staging_half_];
  bytes = (bytes + 15) / 16 * 16;
  while (half.chunk_idx < half.chunks.size() && half.offset + bytes > half.chunks[half.chunk_idx].bytes()) {
    ++half.chunk_idx;
    half.offset = 0;
  }
  if (half.chunk_idx == half.chunks.size()) {
    const size_t last = half.chunks.empty() ? 0 : half.chunks.back().bytes();
    half.chunks.emplace_back(std::max({bytes, size_t{1} << 20, 2 * last}));
    half.offset = 0;
  }
  void* ptr = static_cast<uint8_t*>(half.chunks[half.chunk_idx].data()) + half.offset;
  half.offset += bytes;
  half.used += bytes;
  return ptr;
}

void ScratchPool::reset_staging() {
  staging_half_ = 1 - staging_half_;
  Staging& half = staging_[staging_half_];  // its step has finished (stage's contract)
  if (half.chunks.size() > 1) {  // one chunk of what that step staged, in place of them all
    const size_t bytes = half.used;
    half.chunks.clear();
    half.chunks.emplace_back(std::max(bytes, size_t{1} << 20));
  }
  half.chunk_idx = half.offset = half.used = 0;
}

void ScratchPool::consolidate() {
  // Nothing of the last step is in flight (reset's precondition); freeing first lets the new chunk reuse the memory.
  const size_t bytes = peak_;
  chunks_.clear();
  chunks_.emplace_back(std::max(bytes, size_t{64} << 20));
  ++generation_;
}

CublasHandle::CublasHandle(cudaStream_t stream) {
  DI_CUBLAS_CHECK(cublasCreate(&handle_));
  // cuBLAS was not built with the per-thread default stream: name the stream (by default that one, so its work
  // joins the model's stream).
  DI_CUBLAS_CHECK(cublasSetStream(handle_, stream));
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

}  // namespace deepinfer
