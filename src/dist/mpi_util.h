// Small MPI helpers used by the orchestration (not the data path; that goes through Communicator).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace deepinfer {

// Every rank's string, in rank order, on `root`; empty elsewhere.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine, int root = 0);

// `root`'s string on every rank.
std::string broadcast_string(MPI_Comm comm, const std::string& value, int root);

}  // namespace deepinfer
