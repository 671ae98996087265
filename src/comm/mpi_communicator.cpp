#include "src/comm/mpi_communicator.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "src/core/check.h"
#include "src/comm/mpi_util.h"

namespace deepinfer {

double default_comm_timeout_s() {
  const char* text = std::getenv("DEEPINFER_COMM_TIMEOUT_S");
  if (text == nullptr) return kDefaultCommTimeoutS;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  const bool whole = end != text && *end == '\0' && errno == 0;
  // Below a second the deadline is shorter than the ranks' own start-up and message latency: every wait would
  // expire and each rank blame the others.
  DI_INPUT_CHECK(whole && std::isfinite(value) && value >= kMinCommTimeoutS && value <= kMaxCommTimeoutS,
                 "DEEPINFER_COMM_TIMEOUT_S='{}' is not a number of seconds in [{}, {}]: set it to the longest a rank "
                 "may wait for another (default {})", text, kMinCommTimeoutS, kMaxCommTimeoutS, kDefaultCommTimeoutS);
  return value;
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kBF16: case DType::kF16: return MPI_UINT16_T;
    case DType::kF8E4M3: case DType::kU8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

void wait_or_abort(MPI_Request& request, MPI_Comm comm, double timeout_s, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int done = 0;
  for (int spin = 0;; ++spin) {
    DI_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (spin < 200) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_s) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      spdlog::error("rank {} waited {:.0f} s for {}: giving up and aborting the job (DEEPINFER_COMM_TIMEOUT_S)",
                    rank, waited, what);
      abort_job(kExitRuntimeError);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 2000 ? 20 : 200));
  }
  (void)comm;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
  DI_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DI_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCommunicator::all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                                   std::span<const int64_t> recv_counts, DType dtype, const char* what) {
  DI_CHECK(static_cast<int>(send_counts.size()) == size_ && static_cast<int>(recv_counts.size()) == size_,
           "all_to_all_v counts for {} peers in a group of {}", send_counts.size(), size_);
  std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
  int64_t send_total = 0, recv_total = 0;
  for (int p = 0; p < size_; ++p) {
    DI_CHECK(send_total + send_counts[p] < (int64_t{1} << 31) && recv_total + recv_counts[p] < (int64_t{1} << 31),
             "all_to_all_v of more than 2^31 elements");
    sc[p] = static_cast<int>(send_counts[p]);
    sd[p] = static_cast<int>(send_total);
    rc[p] = static_cast<int>(recv_counts[p]);
    rd[p] = static_cast<int>(recv_total);
    send_total += send_counts[p];
    recv_total += recv_counts[p];
  }
  MPI_Request request;
  const MPI_Datatype type = mpi_datatype(dtype);
  DI_MPI_CHECK(MPI_Ialltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("all-to-all '{}' (group of {})", what, size_));
}

void MpiCommunicator::all_gather(const void* send, void* recv, int64_t count, DType dtype, const char* what) {
  MPI_Request request;
  const MPI_Datatype type = mpi_datatype(dtype);
  DI_MPI_CHECK(MPI_Iallgather(send, static_cast<int>(count), type, recv, static_cast<int>(count), type, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("all-gather '{}' (group of {})", what, size_));
}

void MpiCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype, const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_datatype(dtype), MPI_SUM, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("all-reduce '{}' (group of {})", what, size_));
}

void MpiCommunicator::all_reduce_max(void* data, int64_t count, DType dtype, const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_datatype(dtype), MPI_MAX, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("all-reduce '{}' (group of {})", what, size_));
}

void MpiCommunicator::send(const void* data, int64_t count, DType dtype, int peer, int tag, const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Isend(data, static_cast<int>(count), mpi_datatype(dtype), peer, tag, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("send '{}' to rank {} of its group", what, peer));
}

void MpiCommunicator::recv(void* data, int64_t count, DType dtype, int peer, int tag, const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Irecv(data, static_cast<int>(count), mpi_datatype(dtype), peer, tag, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("receive '{}' from rank {} of its group", what, peer));
}

void MpiCommunicator::broadcast(void* data, int64_t count, DType dtype, int root, const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(count), mpi_datatype(dtype), root, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("broadcast '{}' from rank {} (group of {})", what, root, size_));
}

void MpiCommunicator::barrier(const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Ibarrier(comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("barrier '{}' (group of {})", what, size_));
}

}  // namespace deepinfer
