#include "src/bench/run_metadata.h"

#include <fmt/format.h>

#include <ctime>

#include "src/comm/world.h"
#ifdef DEEPINFER_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace deepinfer {

std::string library_versions() {
  std::string text = fmt::format("MPI: {}", mpi_library_version());
#ifdef DEEPINFER_HAVE_CUDA
  int runtime = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  text += fmt::format("; CUDA runtime {}.{}; NCCL {}", runtime / 1000, runtime % 1000 / 10, nccl);
#endif
  return text;
}

std::string accelerator_name() {
#ifdef DEEPINFER_HAVE_CUDA
  int count = 0;
  cudaDeviceProp props{};
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaGetDeviceProperties(&props, 0) == cudaSuccess)
    return props.name;
  cudaGetLastError();
#endif
  return "cpu";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

}  // namespace deepinfer
