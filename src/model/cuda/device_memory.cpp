#include "src/model/cuda/device_memory.h"

namespace deepinfer {

void* DeviceArena::take(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  if (chunks_.empty() || used_in_chunk_ + bytes > chunks_.back().size()) {
    chunks_.emplace_back(std::max(bytes, chunk_bytes_));
    used_in_chunk_ = 0;
  }
  void* ptr = chunks_.back().data() + used_in_chunk_;
  used_in_chunk_ += bytes;
  used_total_ += bytes;
  return ptr;
}

CublasHandle::CublasHandle() { DI_CUBLAS_CHECK(cublasCreate(&handle_)); }

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

}  // namespace deepinfer
