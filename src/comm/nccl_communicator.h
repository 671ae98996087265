// The Communicator over NCCL: device buffers, one CUDA stream, the communicator created from a unique id that
// world rank 0 of the group broadcasts over MPI. All-to-all is ncclSend/ncclRecv per peer inside one NCCL
// group. Every operation is waited for with a deadline (cudaStreamQuery polling); on timeout the rank
// aborts the NCCL communicator, names the operation and aborts the job.
// NCCL refuses two ranks on one GPU: choose_transport() says which transport a group can use.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "src/comm/communicator.h"

namespace deepinfer {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `group` (MPI). Uses the current CUDA device.
  explicit NcclCommunicator(MPI_Comm group, double timeout_s = default_comm_timeout_s());
  ~NcclCommunicator() override;  // frees local resources only
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  double timeout_s() const override { return timeout_s_; }
  cudaStream_t stream() const { return stream_; }
  // The next operations start after the work already queued on `producer` (device buffers it writes).
  // Every operation itself returns only once done, so work queued after it on any stream sees its results.
  void wait_for(cudaStream_t producer);

  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype, const char* what) override;
  // NCCL's own equal-count all-to-all (count elements to and from each peer): the yardstick for all_to_all_v.
  void all_to_all(const void* send, void* recv, int64_t count, DType dtype, const char* what);
  void all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) override;
  void all_reduce_sum(void* data, int64_t count, DType dtype, const char* what) override;
  void all_reduce_max(void* data, int64_t count, DType dtype, const char* what) override;
  void send(const void* data, int64_t count, DType dtype, int peer, int tag, const char* what) override;
  void recv(void* data, int64_t count, DType dtype, int peer, int tag, const char* what) override;
  void broadcast(void* data, int64_t count, DType dtype, int root, const char* what) override;
  void barrier(const char* what) override;

  // Collective: destroys the NCCL communicator, in the same order on every rank.
  void finalize();

 private:
  void wait(const char* what);

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  void* barrier_word_ = nullptr;  // one device int for barrier()
  cudaEvent_t producer_done_ = nullptr;
};

// Forwards host buffers through a device Communicator (copies in, exchanges, copies out), so that host-side
// code (the expert-parallel dispatcher) runs over NCCL unchanged.
class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(NcclCommunicator& device_comm) : device_(device_comm) {}
  ~HostStagedCommunicator() override;

  int rank() const override { return device_.rank(); }
  int size() const override { return device_.size(); }
  double timeout_s() const override { return device_.timeout_s(); }
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype, const char* what) override;
  void all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) override;
  void all_reduce_sum(void* data, int64_t count, DType dtype, const char* what) override {
    all_reduce(data, count, dtype, false, what);
  }
  void all_reduce_max(void* data, int64_t count, DType dtype, const char* what) override {
    all_reduce(data, count, dtype, true, what);
  }
  void send(const void* data, int64_t count, DType dtype, int peer, int tag, const char* what) override;
  void recv(void* data, int64_t count, DType dtype, int peer, int tag, const char* what) override;
  void broadcast(void* data, int64_t count, DType dtype, int root, const char* what) override;
  void barrier(const char* what) override { device_.barrier(what); }

 private:
  void* staging(size_t bytes, int which);  // which: 0 send side, 1 receive side
  void all_reduce(void* data, int64_t count, DType dtype, bool max, const char* what);

  NcclCommunicator& device_;
  void* buffers_[2] = {nullptr, nullptr};
  size_t capacity_[2] = {0, 0};
};

enum class Transport { kMpi, kNccl };
// kNccl when this build has NCCL, the group has more than one rank, every rank of it has a GPU, and no two of
// them share one; otherwise kMpi. Collective over `group`. `reason` says why.
Transport choose_transport(MPI_Comm group, int my_gpu, const std::string& host, std::string* reason);

}  // namespace deepinfer
