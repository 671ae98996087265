#include "kernels/cuda/sm90a.cuh"

#include <cuda_runtime_api.h>

#include <vector>

namespace deepinfer::cuda {

bool on_sm90() {
  // Every device's compute capability, read once: the callers (the kernels' *_supports) run every layer of a step.
  static const std::vector<bool> kSm90 = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) return std::vector<bool>();
    std::vector<bool> sm90(count);
    for (int device = 0; device < count; ++device) {
      int major = 0, minor = 0;
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
      sm90[device] = major == 9 && minor == 0;
    }
    return sm90;
  }();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return device < static_cast<int>(kSm90.size()) && kSm90[device];
}

}  // namespace deepinfer::cuda
