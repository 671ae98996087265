#include "src/comm/mpi_session.h"

#include "src/core/check.h"

namespace deepinfer {

namespace detail {

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

static_assert(MPI_SUCCESS == 0, "DI_MPI_CHECK (src/core/check.h) takes 0 for success");

void throw_mpi_failure(const char* file, int line, std::string_view statement, int mpi_code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(mpi_code, text, &len);
  throw_check_failure(file, line, statement, std::string_view(text, len));
}

}  // namespace detail

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  DI_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as codes, so DI_MPI_CHECK can name the call instead of MPI aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

void MpiSession::finalize() {
  if (finalized_) return;
  finalized_ = true;
  MPI_Finalize();
}

MpiSession::~MpiSession() {
  // Reached normally only after finalize(). If an exception unwound past it, MPI_Abort was already called.
}

}  // namespace deepinfer
