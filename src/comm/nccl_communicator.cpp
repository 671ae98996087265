#include "src/comm/nccl_communicator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>
#include <vector>

#include "src/core/check.h"
#include "src/comm/mpi_util.h"

namespace deepinfer {

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kF8E4M3: case DType::kU8: return ncclUint8;
  }
  return ncclUint8;
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm group, double timeout_s) : timeout_s_(timeout_s) {
  DI_MPI_CHECK(MPI_Comm_rank(group, &rank_));
  DI_MPI_CHECK(MPI_Comm_size(group, &size_));
  ncclUniqueId id{};
  if (rank_ == 0) DI_NCCL_CHECK(ncclGetUniqueId(&id));
  DI_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group));
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DI_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  DI_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(int32_t)));
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming));
}

NcclCommunicator::~NcclCommunicator() {
  if (producer_done_ != nullptr) cudaEventDestroy(producer_done_);
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  // comm_ is destroyed collectively in finalize(); if it was not, leaking it is safer than a hang.
}

void NcclCommunicator::finalize() {
  if (comm_ == nullptr) return;
  DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  DI_NCCL_CHECK(ncclCommDestroy(comm_));
  comm_ = nullptr;
}

void NcclCommunicator::wait_for(cudaStream_t producer) {
  DI_CUDA_CHECK(cudaEventRecord(producer_done_, producer));
  DI_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_done_, 0));
}

void NcclCommunicator::wait(const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int spin = 0;; ++spin) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) DI_CUDA_CHECK(state);
    ncclResult_t async_error = ncclSuccess;
    DI_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
    DI_NCCL_CHECK(async_error);
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_s_) {
      int world_rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      spdlog::error("rank {} waited {:.0f} s for NCCL '{}' (group of {}): aborting NCCL and the job", world_rank,
                    waited, what, size_);
      spdlog::default_logger()->flush();
      ncclCommAbort(comm_);
      MPI_Abort(MPI_COMM_WORLD, kExitRuntimeError);
    }
    if (spin > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                                    std::span<const int64_t> recv_counts, DType dtype, const char* what) {
  const size_t elem = dtype_size(dtype);
  int64_t send_offset = 0, recv_offset = 0;
  DI_NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < size_; ++peer) {
    if (send_counts[peer] > 0)
      DI_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + send_offset * elem, send_counts[peer], nccl_type(dtype),
                             peer, comm_, stream_));
    if (recv_counts[peer] > 0)
      DI_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + recv_offset * elem, recv_counts[peer], nccl_type(dtype), peer,
                             comm_, stream_));
    send_offset += send_counts[peer];
    recv_offset += recv_counts[peer];
  }
  DI_NCCL_CHECK(ncclGroupEnd());
  wait(what);
}

void NcclCommunicator::all_to_all(const void* send, void* recv, int64_t count, DType dtype, const char* what) {
  DI_NCCL_CHECK(ncclAlltoAll(send, recv, count, nccl_type(dtype), comm_, stream_));
  wait(what);
}

void NcclCommunicator::all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) {
  DI_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(dtype), comm_, stream_));
  wait(what);
}

void NcclCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype, const char* what) {
  DI_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm_, stream_));
  wait(what);
}

void NcclCommunicator::all_reduce_max(void* data, int64_t count, DType dtype, const char* what) {
  DI_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dtype), ncclMax, comm_, stream_));
  wait(what);
}

void NcclCommunicator::send(const void* data, int64_t count, DType dtype, int peer, int, const char* what) {
  DI_NCCL_CHECK(ncclSend(data, count, nccl_type(dtype), peer, comm_, stream_));
  wait(what);
}

void NcclCommunicator::recv(void* data, int64_t count, DType dtype, int peer, int, const char* what) {
  DI_NCCL_CHECK(ncclRecv(data, count, nccl_type(dtype), peer, comm_, stream_));
  wait(what);
}

void NcclCommunicator::broadcast(void* data, int64_t count, DType dtype, int root, const char* what) {
  DI_NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, stream_));
  wait(what);
}

void NcclCommunicator::barrier(const char* what) {
  DI_NCCL_CHECK(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_));
  wait(what);
}

HostStagedCommunicator::~HostStagedCommunicator() {
  for (void* buffer : buffers_)
    if (buffer != nullptr) cudaFree(buffer);
}

void* HostStagedCommunicator::staging(size_t bytes, int which) {
  if (bytes > capacity_[which]) {
    if (buffers_[which] != nullptr) DI_CUDA_CHECK(cudaFree(buffers_[which]));
    capacity_[which] = std::max(bytes, 2 * capacity_[which]);
    DI_CUDA_CHECK(cudaMalloc(&buffers_[which], capacity_[which]));
  }
  return buffers_[which];
}

void HostStagedCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                                          std::span<const int64_t> recv_counts, DType dtype, const char* what) {
  int64_t send_total = 0, recv_total = 0;
  for (int p = 0; p < size(); ++p) send_total += send_counts[p], recv_total += recv_counts[p];
  const size_t elem = dtype_size(dtype);
  void* d_send = staging(std::max<size_t>(send_total * elem, 1), 0);
  void* d_recv = staging(std::max<size_t>(recv_total * elem, 1), 1);
  DI_CUDA_CHECK(cudaMemcpy(d_send, send, send_total * elem, cudaMemcpyHostToDevice));
  device_.all_to_all_v(d_send, send_counts, d_recv, recv_counts, dtype, what);
  DI_CUDA_CHECK(cudaMemcpy(recv, d_recv, recv_total * elem, cudaMemcpyDeviceToHost));
}

void HostStagedCommunicator::all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) {
  const size_t bytes = count * dtype_size(dtype);
  void* d_send = staging(std::max<size_t>(bytes, 1), 0);
  void* d_recv = staging(std::max<size_t>(bytes * size(), 1), 1);
  DI_CUDA_CHECK(cudaMemcpy(d_send, send, bytes, cudaMemcpyHostToDevice));
  device_.all_gather(d_send, d_recv, count, dtype, what);
  DI_CUDA_CHECK(cudaMemcpy(recv, d_recv, bytes * size(), cudaMemcpyDeviceToHost));
}

void HostStagedCommunicator::all_reduce(void* data, int64_t count, DType dtype, bool max, const char* what) {
  const size_t bytes = count * dtype_size(dtype);
  void* d = staging(std::max<size_t>(bytes, 1), 0);
  DI_CUDA_CHECK(cudaMemcpy(d, data, bytes, cudaMemcpyHostToDevice));
  if (max) device_.all_reduce_max(d, count, dtype, what);
  else device_.all_reduce_sum(d, count, dtype, what);
  DI_CUDA_CHECK(cudaMemcpy(data, d, bytes, cudaMemcpyDeviceToHost));
}

void HostStagedCommunicator::send(const void* data, int64_t count, DType dtype, int peer, int tag, const char* what) {
  const size_t bytes = count * dtype_size(dtype);
  void* d = staging(std::max<size_t>(bytes, 1), 0);
  DI_CUDA_CHECK(cudaMemcpy(d, data, bytes, cudaMemcpyHostToDevice));
  device_.send(d, count, dtype, peer, tag, what);
}

void HostStagedCommunicator::recv(void* data, int64_t count, DType dtype, int peer, int tag, const char* what) {
  const size_t bytes = count * dtype_size(dtype);
  void* d = staging(std::max<size_t>(bytes, 1), 1);
  device_.recv(d, count, dtype, peer, tag, what);
  DI_CUDA_CHECK(cudaMemcpy(data, d, bytes, cudaMemcpyDeviceToHost));
}

void HostStagedCommunicator::broadcast(void* data, int64_t count, DType dtype, int root, const char* what) {
  const size_t bytes = count * dtype_size(dtype);
  void* d = staging(std::max<size_t>(bytes, 1), 0);
  DI_CUDA_CHECK(cudaMemcpy(d, data, bytes, cudaMemcpyHostToDevice));
  device_.broadcast(d, count, dtype, root, what);
  DI_CUDA_CHECK(cudaMemcpy(data, d, bytes, cudaMemcpyDeviceToHost));
}

Transport choose_transport(MPI_Comm group, int my_gpu, const std::string& host, std::string* reason) {
  int size = 1;
  DI_MPI_CHECK(MPI_Comm_size(group, &size));
  if (size == 1) {  // nothing to exchange: no NCCL communicator to set up (its start-up costs a good part of a second)
    if (reason != nullptr) *reason = "a group of one rank exchanges nothing";
    return Transport::kMpi;
  }
  const std::vector<std::string> all = gather_strings(group, fmt::format("{}#{}", host, my_gpu));
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  int verdict = 0;  // 0 NCCL, 1 some rank has no GPU, 2 a GPU is shared
  if (rank == 0) {
    for (size_t i = 0; i < all.size() && verdict == 0; ++i) {
      if (all[i].ends_with("#-1")) verdict = 1;
      for (size_t j = 0; j < i && verdict == 0; ++j)
        if (all[i] == all[j]) verdict = 2;
    }
  }
  DI_MPI_CHECK(MPI_Bcast(&verdict, 1, MPI_INT, 0, group));
  if (reason != nullptr)
    *reason = verdict == 0 ? "every rank of the group has its own GPU"
              : verdict == 1 ? "some rank of the group has no GPU"
                             : "ranks of the group share a GPU, which NCCL refuses";
  return verdict == 0 ? Transport::kNccl : Transport::kMpi;
}

}  // namespace deepinfer
