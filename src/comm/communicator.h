// Communicator: the collective and point-to-point operations the engine's data path uses, over one group of
// ranks. Buffers live in the implementation's memory space (host for MPI, device for NCCL). Every operation
// waits at most timeout_s(); a rank that times out names itself, the operation and the peer, then aborts the
// job, so a dead or diverged rank never leaves the others waiting forever.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "src/core/tensor.h"

namespace deepinfer {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual double timeout_s() const = 0;

  // Sends send_counts[p] elements to each peer p (consecutive in `send`, in peer order) and receives
  // recv_counts[p] from each (likewise). `what` names the exchange in timeout messages.
  virtual void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                            std::span<const int64_t> recv_counts, DType dtype, const char* what) = 0;
  // Every rank sends `count` elements; recv holds size() * count, in rank order.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) = 0;
  virtual void all_reduce_sum(void* data, int64_t count, DType dtype, const char* what) = 0;
  virtual void all_reduce_max(void* data, int64_t count, DType dtype, const char* what) = 0;
  virtual void send(const void* data, int64_t count, DType dtype, int peer, int tag, const char* what) = 0;
  virtual void recv(void* data, int64_t count, DType dtype, int peer, int tag, const char* what) = 0;
  virtual void broadcast(void* data, int64_t count, DType dtype, int root, const char* what) = 0;
  virtual void barrier(const char* what) = 0;
};

// Seconds a rank waits for one exchange before it aborts the job: DEEPINFER_COMM_TIMEOUT_S, default 600. The
// value must be a finite number of seconds in [1, 1e7]; anything else ("abc", "", "nan", "-1", "1e-300") is an
// InputError naming the variable, never a silent 0 or an endless wait.
inline constexpr double kDefaultCommTimeoutS = 600.0;
inline constexpr double kMinCommTimeoutS = 1.0, kMaxCommTimeoutS = 1e7;
double default_comm_timeout_s();

}  // namespace deepinfer
