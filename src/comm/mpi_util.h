// Small MPI helpers used by the orchestration (not the data path; that goes through Communicator).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

// Every rank's string, in rank order, on `root`; empty elsewhere.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine, int root = 0);

// `root`'s string on every rank.
std::string broadcast_string(MPI_Comm comm, const std::string& value, int root);

// Every rank's `count` values, in rank order, on `root` (empty elsewhere), waiting at most `timeout_s`.
std::vector<int64_t> gather_int64_to_root(MPI_Comm comm, const int64_t* mine, int64_t count, int root,
                                          double timeout_s, const char* what);
std::vector<double> gather_f64_to_root(MPI_Comm comm, const double* mine, int64_t count, int root, double timeout_s,
                                       const char* what);

// Ends every rank of the job now with `code` (MPI_Abort), after the log is flushed.
[[noreturn]] void abort_job(int code);

}  // namespace deepinfer
