// Device memory owned by the orchestration: a chunked arena for weights (few large cudaMallocs, freed together)
// and per-step scratch. Kernels only ever see pointers into these.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>
#include <vector>

#include "src/core/arena_plan.h"
#include "src/core/device_array.h"
#include "src/core/tensor.h"

namespace deepinfer {

// Makes `device` the calling thread's current device when constructed. Streams, events, cuBLAS handles and
// allocations belong to the device that is current when they are created, so a class declares one of these
// before its other CUDA members: member initialisation then creates all of them on its device, not on GPU 0.
class DeviceSelection {
 public:
  explicit DeviceSelection(int device) : device_(device) { DI_CUDA_CHECK(cudaSetDevice(device)); }
  int id() const { return device_; }

 private:
  int device_;
};

// Weights: a block per large take and shared 1 GiB chunks for the rest (ArenaPlan says where each take goes), all
// freed together.
class DeviceArena {
 public:
  explicit DeviceArena(size_t chunk_bytes = size_t{1} << 30) : plan_(chunk_bytes) {}
  // 256-byte aligned, valid until the arena is destroyed.
  void* take(size_t bytes);
  size_t bytes_in_use() const { return plan_.bytes_used(); }
  size_t bytes_reserved() const { return plan_.bytes_reserved(); }  // what cudaMalloc gave the arena

 private:
  ArenaPlan plan_;
  std::vector<DeviceArray<uint8_t>> blocks_;
  size_t chunk_ = 0;  // blocks_' index of the current shared chunk
};

// Pinned host memory mapped into every device's address space (RAII): kernels read it over PCIe through the
// same pointer (unified addressing), for tables too large for GPU memory that a step only gathers rows from; and,
// being pinned, the host side of asynchronous copies (ScratchPool::stage, DeviceSampler).
class MappedHostArray {
 public:
  MappedHostArray() = default;
  explicit MappedHostArray(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) DI_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  }
  MappedHostArray(MappedHostArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  MappedHostArray& operator=(MappedHostArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~MappedHostArray() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Device buffers that live for one forward step: a bump allocator over chunks that are kept from step to step,
// so that after the first steps no step calls cudaMalloc. reset() starts a step; every buffer of the previous step
// is then reused by kernels queued after the previous step's on the same stream (overlapped scheduling starts a step
// before the previous one's kernels are done). A step that had to add chunks is followed, at the next reset(), by
// one chunk as large as that step's peak in place of them all (without it, growth by doubling held up to three
// times a large prefill's need: the rank slice of a V4.1 prefill rank ran out of memory at 16,384 tokens);
// generation() then changes, for whatever baked in addresses.
class ScratchPool {
 public:
  void reset() {
    reset_staging();
    if (grew_ && chunks_.size() > 1) consolidate();
    grew_ = false;
    peak_ = 0;
    chunk_idx_ = 0;
    offset_ = 0;
  }
  uint64_t generation() const { return generation_; }
  // A layer's temporaries die with the layer: mark() after the step-wide buffers, rewind() before each layer,
  // so the pool's peak is one layer's worth, not the whole model's.
  struct Mark {
    size_t chunk_idx;
    size_t offset;
  };
  Mark mark() const { return {chunk_idx_, offset_}; }
  void rewind(Mark mark) {
    chunk_idx_ = mark.chunk_idx;
    offset_ = mark.offset;
  }
  template <class T>
  T* alloc(size_t count) {
    return reinterpret_cast<T*>(take(std::max<size_t>(count * sizeof(T), 1)));
  }
  // Pinned host memory for the step's uploads (device_copy), which then copy asynchronously: the host does not wait
  // for the device's queue to drain before each upload. Alternate steps use alternate halves, so a half is written
  // again only two steps later, when the step that used it has finished (its results are back; the engine finishes
  // step N before it starts N + 2).
  void* stage(size_t bytes);

 private:
  void* take(size_t bytes);
  void consolidate();
  void reset_staging();

  std::vector<DeviceArray<uint8_t>> chunks_;
  size_t chunk_idx_ = 0;
  size_t offset_ = 0;
  bool grew_ = false;
  size_t peak_ = 0;  // this step's highest end, counting every earlier chunk whole (so one chunk of it holds the step)
  uint64_t generation_ = 0;
  struct Staging {
    std::vector<MappedHostArray> chunks;
    size_t chunk_idx = 0, offset = 0, used = 0;  // used: this step's bytes, for one chunk of them next time
  };
  Staging staging_[2];
  int staging_half_ = 0;
};

// A host vector copied to `dst` on the device on the per-thread default stream, through the pool's pinned staging:
// the host may reuse `host` at once and does not wait for the device; kernels queued after it on the stream see it.
template <class T>
void copy_to_device(ScratchPool& scratch, const std::vector<T>& host, T* dst) {
  if (host.empty()) return;
  const size_t bytes = host.size() * sizeof(T);
  void* staged = scratch.stage(bytes);
  std::memcpy(staged, host.data(), bytes);
  DI_CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
}

// The same into step scratch.
template <class T>
T* device_copy(ScratchPool& scratch, const std::vector<T>& host) {
  T* ptr = scratch.alloc<T>(host.size());
  copy_to_device(scratch, host, ptr);
  return ptr;
}

inline std::vector<uint16_t> to_bf16_bits(const float* data, int64_t n) {
  std::vector<uint16_t> bits(n);
  for (int64_t i = 0; i < n; ++i) bits[i] = float_to_bf16(data[i]);
  return bits;
}

// A CUDA event that records timing (RAII).
class CudaEvent {
 public:
  CudaEvent() { DI_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A non-blocking CUDA stream (RAII): work that may overlap the model's per-thread default stream.
class CudaStream {
 public:
  CudaStream() { DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream = cudaStreamPerThread);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

#define DI_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                    \
    cublasStatus_t di_cublas_rc_ = (call);                                                                \
    if (di_cublas_rc_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                              \
      ::deepinfer::detail::throw_check_failure(__FILE__, __LINE__, #call,                                 \
                                               ::fmt::format("{} on {}", cublasGetStatusString(di_cublas_rc_), \
                                                             ::deepinfer::detail::cuda_device_label()));  \
  } while (0)

}  // namespace deepinfer
