#include "src/core/device.h"

#ifdef DEEPINFER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace deepinfer {

int cuda_device_count() {
#ifdef DEEPINFER_HAVE_CUDA
  int count = 0;
  // No driver or no device is a normal state on CPU machines, not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace deepinfer
