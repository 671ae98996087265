#include "kernels/cuda/sm90a.cuh"

#include <cuda_runtime_api.h>

namespace deepinfer::cuda {

bool on_sm90() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

}  // namespace deepinfer::cuda
