#include "src/core/check.h"

namespace deepinfer::detail {

// rank_label() is defined in src/comm/mpi_session.cpp: comm/ owns every MPI call.

void throw_check_failure(const char* file, int line, std::string_view statement,
                         std::string_view detail) {
  throw Error(fmt::format("[{}] {}:{}: `{}` failed: {}", rank_label(), file, line, statement, detail));
}

}  // namespace deepinfer::detail
