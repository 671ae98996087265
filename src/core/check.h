// The one header of error macros. Each failure message names the failed statement, file:line, the MPI rank
// and (for CUDA/NCCL) the device, and for NCCL its last error string.
//
//   DI_CHECK(cond, "fmt {}", args...)   an invariant of the engine; throws deepinfer::Error
//   DI_INPUT_CHECK(cond, "fmt", ...)    a property of the user's input; throws deepinfer::InputError
//   DI_MPI_CHECK(call)  DI_H5_CHECK(call)  DI_CUDA_CHECK(call)  DI_NCCL_CHECK(call)
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "src/core/error.h"

namespace deepinfer::detail {

// "rank 3" when MPI is initialised, "rank ?" otherwise.
std::string rank_label();
[[noreturn]] void throw_check_failure(const char* file, int line, std::string_view statement,
                                      std::string_view detail);
// An MPI call's failure: its error string, from comm/ (src/comm/mpi_session.cpp), which owns every MPI call.
[[noreturn]] void throw_mpi_failure(const char* file, int line, std::string_view statement, int mpi_code);
// The innermost messages of HDF5's error stack (where the system's reason, e.g. "No space left on device",
// lives), for DI_H5_CHECK; defined beside the HDF5 writers.
std::string hdf5_error_detail();

}  // namespace deepinfer::detail

#define DI_CHECK(cond, ...)                                                                         \
  do {                                                                                              \
    if (!(cond)) [[unlikely]]                                                                       \
      ::deepinfer::detail::throw_check_failure(__FILE__, __LINE__, #cond,                           \
                                               ::fmt::format(__VA_ARGS__));                         \
  } while (0)

#define DI_INPUT_CHECK(cond, ...)                                                                   \
  do {                                                                                              \
    if (!(cond)) [[unlikely]]                                                                       \
      throw ::deepinfer::InputError(::fmt::format(__VA_ARGS__));                                    \
  } while (0)

// MPI_SUCCESS is 0 by the standard (static_assert in src/comm/mpi_session.cpp).
#define DI_MPI_CHECK(call)                                                                          \
  do {                                                                                              \
    const int di_mpi_rc_ = (call);                                                                  \
    if (di_mpi_rc_ != 0) [[unlikely]]                                                               \
      ::deepinfer::detail::throw_mpi_failure(__FILE__, __LINE__, #call, di_mpi_rc_);                \
  } while (0)

// HDF5 calls return a negative herr_t or hid_t on failure.
#define DI_H5_CHECK(call)                                                                           \
  ([&]() {                                                                                          \
    auto di_h5_rc_ = (call);                                                                        \
    if (di_h5_rc_ < 0) [[unlikely]]                                                                 \
      ::deepinfer::detail::throw_check_failure(__FILE__, __LINE__, #call,                           \
                                               ::deepinfer::detail::hdf5_error_detail());           \
    return di_h5_rc_;                                                                               \
  }())

#if defined(__CUDACC__) || defined(DEEPINFER_HAVE_CUDA)
#include <cuda_runtime_api.h>

namespace deepinfer::detail {
inline std::string cuda_device_label() {
  int device = -1;
  return cudaGetDevice(&device) == cudaSuccess ? fmt::format("cuda:{}", device) : "cuda:?";
}
}  // namespace deepinfer::detail

#define DI_CUDA_CHECK(call)                                                                         \
  do {                                                                                              \
    cudaError_t di_cuda_rc_ = (call);                                                               \
    if (di_cuda_rc_ != cudaSuccess) [[unlikely]]                                                    \
      ::deepinfer::detail::throw_check_failure(                                                     \
          __FILE__, __LINE__, #call,                                                                \
          ::fmt::format("{} ({}) on {}", cudaGetErrorString(di_cuda_rc_),                           \
                        cudaGetErrorName(di_cuda_rc_), ::deepinfer::detail::cuda_device_label()));  \
  } while (0)

#define DI_NCCL_CHECK(call)                                                                         \
  do {                                                                                              \
    ncclResult_t di_nccl_rc_ = (call);                                                              \
    if (di_nccl_rc_ != ncclSuccess && di_nccl_rc_ != ncclInProgress) [[unlikely]]                   \
      ::deepinfer::detail::throw_check_failure(                                                     \
          __FILE__, __LINE__, #call,                                                                \
          ::fmt::format("{}; last NCCL error: {} on {}", ncclGetErrorString(di_nccl_rc_),           \
                        ncclGetLastError(nullptr), ::deepinfer::detail::cuda_device_label()));      \
  } while (0)
#endif
