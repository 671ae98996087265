#include "src/comm/mailbox.h"

#include <fmt/format.h>

#include "src/core/check.h"
#include "src/comm/mpi_communicator.h"

namespace deepinfer {

namespace {

int element_count(int64_t count) {
  DI_CHECK(count >= 0 && count < (int64_t{1} << 31), "a message of {} elements (MPI counts are 32-bit)", count);
  return static_cast<int>(count);
}

}  // namespace

Mailbox::Mailbox(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
  DI_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
}

void Mailbox::post(std::shared_ptr<const void> owner, const void* data, int64_t count, DType dtype, int dest,
                   int tag) {
  PendingSend send{std::move(owner), MPI_REQUEST_NULL, dest, tag};
  DI_MPI_CHECK(MPI_Isend(data, element_count(count), mpi_datatype(dtype), dest, tag, comm_, &send.request));
  sends_.push_back(std::move(send));
}

void Mailbox::progress() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    DI_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? sends_.erase(it) : std::next(it);
  }
}

void Mailbox::drain() {
  for (PendingSend& s : sends_)
    wait_or_abort(s.request, comm_, timeout_s_, fmt::format("send with tag {} to rank {}", s.tag, s.dest));
  sends_.clear();
}

std::optional<Mailbox::Arrival> Mailbox::probe(int tag, DType dtype, int source) const {
  int flag = 0;
  MPI_Status status;
  DI_MPI_CHECK(MPI_Iprobe(source == kAnySource ? MPI_ANY_SOURCE : source, tag, comm_, &flag, &status));
  if (!flag) return std::nullopt;
  int count = 0;
  DI_MPI_CHECK(MPI_Get_count(&status, mpi_datatype(dtype), &count));
  return Arrival{status.MPI_SOURCE, count};
}

void Mailbox::receive(void* data, int64_t count, DType dtype, int source, int tag, const char* what) {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Irecv(data, element_count(count), mpi_datatype(dtype), source, tag, comm_, &request));
  wait_or_abort(request, comm_, timeout_s_, fmt::format("{} from rank {}", what, source));
}

}  // namespace deepinfer
