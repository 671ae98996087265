// Tagged point-to-point messages between any two ranks of one communicator (the world), outside the lockstep
// collectives: the prefill -> decode KV handoff, results to world rank 0, the stop signal. A send is
// non-blocking and keeps its buffer's owner alive until MPI is done with it; a receive, and the final drain of
// the sends, wait at most the deadline, then name the peer and the message and end the job.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "src/core/tensor.h"

namespace deepinfer {

class Mailbox {
 public:
  static constexpr int kAnySource = -1;

  // Does not own `comm`.
  Mailbox(MPI_Comm comm, double timeout_s);
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  int rank() const { return rank_; }

  // Sends `count` elements at `data` (kept alive by `owner`) to `dest` with `tag`; returns at once.
  void post(std::shared_ptr<const void> owner, const void* data, int64_t count, DType dtype, int dest, int tag);
  // Retires the sends that have completed.
  void progress();
  // Waits (with the deadline) until every posted send has completed.
  void drain();

  struct Arrival {
    int source = 0;
    int64_t count = 0;  // elements of the dtype asked for
  };
  // A message with `tag` that has arrived (from `source`, or any), without receiving it.
  std::optional<Arrival> probe(int tag, DType dtype, int source = kAnySource) const;
  // Receives a message (usually one announced by probe), waiting at most the deadline.
  void receive(void* data, int64_t count, DType dtype, int source, int tag, const char* what);

 private:
  struct PendingSend {
    std::shared_ptr<const void> owner;
    MPI_Request request;
    int dest;
    int tag;
  };
  MPI_Comm comm_;
  int rank_ = 0;
  double timeout_s_;
  std::list<PendingSend> sends_;
};

}  // namespace deepinfer
