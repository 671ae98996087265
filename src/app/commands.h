// The subcommands. main.cpp parses argv into these option structs; each run_* returns the process exit code
// (the same on every rank).
#pragma once

#include <mpi.h>

#include <string>

namespace deepinfer::app {

struct InfoOptions {
  std::string deploy_path;
};
int run_info(const InfoOptions& options, MPI_Comm world);

}  // namespace deepinfer::app
