// The job's ranks as the commands see them. Commands (src/app) and benchmarks (src/bench) never call MPI
// themselves: they ask World for this process's rank and the world's size, and for the few whole-world steps
// they take outside the data path, each bounded by the communication deadline (DEEPINFER_COMM_TIMEOUT_S).
// comm/ classes (Topology, the communicators, Mailbox) take comm() to build on.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace deepinfer {

class World {
 public:
  explicit World(MPI_Comm comm);  // does not own `comm`

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }

  struct HostRanks {
    int rank = 0;  // this process's index among the ranks on its host
    int size = 1;  // ranks on its host
  };
  // Collective.
  HostRanks host_ranks() const;
  // Collective, with the deadline.
  void barrier(const char* what) const;
  double max_over_ranks(double value, const char* what) const;
  void sum_over_ranks(double* values, int count, const char* what) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

// "Open MPI v4.1.4" and the like: the MPI library's version, for result files.
std::string mpi_library_version();

}  // namespace deepinfer
