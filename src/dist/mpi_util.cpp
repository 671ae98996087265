#include "src/dist/mpi_util.h"

#include "src/core/check.h"

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

}  // namespace deepinfer
