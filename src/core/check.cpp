#include "src/core/check.h"

#include <mpi.h>

namespace deepinfer::detail {

std::string rank_label() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return "rank ?";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return fmt::format("rank {}", rank);
}

void throw_check_failure(const char* file, int line, std::string_view statement,
                         std::string_view detail) {
  throw Error(fmt::format("[{}] {}:{}: `{}` failed: {}", rank_label(), file, line, statement, detail));
}

}  // namespace deepinfer::detail
