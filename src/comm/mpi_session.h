// The process's MPI lifetime. MPI_Finalize is the last collective step of every rank; it runs in
// finalize(), called explicitly in the same order on every rank (never from a destructor on an error path,
// where peers may be waiting elsewhere).
#pragma once

#include <mpi.h>

#include "src/comm/world.h"

namespace deepinfer {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession();

  int world_rank() const { return world_rank_; }
  World world() const { return World(MPI_COMM_WORLD); }
  int world_size() const { return world_size_; }
  void finalize();

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  bool finalized_ = false;
};

}  // namespace deepinfer
