#include "src/app/spmd_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <climits>
#include <cstdio>
#include <exception>

#include "src/core/check.h"
#include "src/dist/mpi_util.h"

namespace deepinfer::app {

namespace {

// Runs `step`, turning an exception into (exit code, message).
std::pair<int, std::string> capture(const std::function<void()>& step) {
  try {
    step();
    return {0, {}};
  } catch (const InputError& e) {
    return {kExitInputError, e.what()};
  } catch (const std::exception& e) {
    return {kExitRuntimeError, e.what()};
  }
}

}  // namespace

int run_spmd_command(MPI_Comm world, const std::function<void()>& prepare,
                     const std::function<void()>& execute) {
  int rank = 0;
  DI_MPI_CHECK(MPI_Comm_rank(world, &rank));

  auto [code, message] = capture(prepare);
  int first_failed = code != 0 ? rank : INT_MAX;
  DI_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, world));
  if (first_failed != INT_MAX) {
    const std::string first_message = broadcast_string(world, message, first_failed);
    int agreed_code = code;
    DI_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &agreed_code, 1, MPI_INT, MPI_MAX, world));
    if (rank == 0) {
      const std::string origin = first_failed == 0 ? "" : fmt::format(" (on rank {})", first_failed);
      fmt::print(stderr, "deepinfer: error{}: {}\n", origin, first_message);
      std::fflush(stderr);
    }
    return agreed_code;
  }

  std::tie(code, message) = capture(execute);
  if (code != 0) {
    fmt::print(stderr, "deepinfer: error on rank {}: {}\n", rank, message);
    std::fflush(stderr);
    MPI_Abort(world, code);
  }
  return 0;
}

}  // namespace deepinfer::app
