// Helpers for multi-rank tests: every rank checks its own part; failures on any rank fail the test.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

namespace deepinfer::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// True on every rank iff `ok` holds on every rank.
inline bool all_ranks(bool ok) {
  int value = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return value == 1;
}

// The GPU this rank uses when every rank on its host has one of its own (NCCL's condition), else -1 on
// every rank. Collective.
int own_gpu_or_none();

}  // namespace deepinfer::testing
