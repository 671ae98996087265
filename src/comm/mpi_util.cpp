#include "src/comm/mpi_util.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#include "src/core/check.h"
#include "src/comm/mpi_communicator.h"

namespace deepinfer {

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine, int root) {
  int rank = 0;
  int size = 0;
  DI_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DI_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int my_len = static_cast<int>(mine.size());
  std::vector<int> lens(rank == root ? size : 0);
  DI_MPI_CHECK(MPI_Gather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm));
  std::vector<int> offsets(lens.size(), 0);
  int total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    offsets[i] = total;
    total += lens[i];
  }
  std::string all(total, '\0');
  DI_MPI_CHECK(MPI_Gatherv(mine.data(), my_len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                           root, comm));
  std::vector<std::string> result;
  for (size_t i = 0; i < lens.size(); ++i) result.push_back(all.substr(offsets[i], lens[i]));
  return result;
}

std::string broadcast_string(MPI_Comm comm, const std::string& value, int root) {
  int rank = 0;
  DI_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int len = static_cast<int>(value.size());
  DI_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, root, comm));
  std::string result = rank == root ? value : std::string(len, '\0');
  DI_MPI_CHECK(MPI_Bcast(result.data(), len, MPI_CHAR, root, comm));
  return result;
}

namespace {

int gather_count(int64_t count) {
  DI_CHECK(count >= 0 && count < (int64_t{1} << 31), "a gather of {} elements (MPI counts are 32-bit)", count);
  return static_cast<int>(count);
}

}  // namespace

namespace {

template <typename T>
std::vector<T> gather_to_root(MPI_Comm comm, const T* mine, int64_t count, MPI_Datatype type, int root,
                              double timeout_s, const char* what) {
  int rank = 0, size = 0;
  DI_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DI_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<T> all(rank == root ? count * size : 0);
  MPI_Request request;
  DI_MPI_CHECK(MPI_Igather(mine, gather_count(count), type, all.data(), gather_count(count), type, root, comm,
                           &request));
  wait_or_abort(request, comm, timeout_s, what);
  return all;
}

}  // namespace

std::vector<int64_t> gather_int64_to_root(MPI_Comm comm, const int64_t* mine, int64_t count, int root,
                                          double timeout_s, const char* what) {
  return gather_to_root(comm, mine, count, MPI_INT64_T, root, timeout_s, what);
}

std::vector<double> gather_f64_to_root(MPI_Comm comm, const double* mine, int64_t count, int root, double timeout_s,
                                       const char* what) {
  return gather_to_root(comm, mine, count, MPI_DOUBLE, root, timeout_s, what);
}

void abort_job(int code) {
  spdlog::default_logger()->flush();
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return
}

}  // namespace deepinfer
