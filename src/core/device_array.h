// DeviceArray<T>: an owned array in device memory (cudaMalloc/cudaFree), with host copies in and out.
// Only for builds with the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "src/core/check.h"

namespace deepinfer {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t size) : size_(size) {
    if (size_ > 0) DI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), size_ * sizeof(T)));
  }
  static DeviceArray from_host(const std::vector<T>& host) {
    DeviceArray array(host.size());
    array.copy_from(host);
    return array;
  }
  DeviceArray(DeviceArray&& other) noexcept : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

  void copy_from(const std::vector<T>& host) {
    DI_CHECK(host.size() == size_, "copying {} elements into a device array of {}", host.size(), size_);
    if (size_ > 0) DI_CUDA_CHECK(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (size_ > 0) DI_CUDA_CHECK(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with 0xff (NaN for floats), so that unwritten outputs show.
  void poison() {
    if (size_ > 0) DI_CUDA_CHECK(cudaMemset(data_, 0xff, size_ * sizeof(T)));
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace deepinfer
