// The Communicator over MPI and host memory. Each operation is the non-blocking MPI call followed by a
// polling wait with a deadline: spinning first, then sleeping, so that oversubscribed CPU runs (68 ranks on
// 2 cores in CI) leave the cores to the ranks that compute.
#pragma once

#include <mpi.h>

#include "src/comm/communicator.h"

namespace deepinfer {

class MpiCommunicator final : public Communicator {
 public:
  // Does not own `comm` (the Topology does).
  explicit MpiCommunicator(MPI_Comm comm, double timeout_s = default_comm_timeout_s());

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double timeout_s() const override { return timeout_s_; }
  MPI_Comm comm() const { return comm_; }

  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype, const char* what) override;
  void all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) override;
  void all_reduce_sum(void* data, int64_t count, DType dtype, const char* what) override;
  void all_reduce_max(void* data, int64_t count, DType dtype, const char* what) override;
  void send(const void* data, int64_t count, DType dtype, int peer, int tag, const char* what) override;
  void recv(void* data, int64_t count, DType dtype, int peer, int tag, const char* what) override;
  void broadcast(void* data, int64_t count, DType dtype, int root, const char* what) override;
  void barrier(const char* what) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
};

MPI_Datatype mpi_datatype(DType dtype);

// Waits for `request` until the deadline; on timeout logs "rank R waited T s for WHAT" and aborts the job.
void wait_or_abort(MPI_Request& request, MPI_Comm comm, double timeout_s, const std::string& what);

}  // namespace deepinfer
