#include "src/comm/world.h"

#include "src/core/check.h"
#include "src/comm/communicator.h"
#include "src/comm/mpi_communicator.h"

namespace deepinfer {

World::World(MPI_Comm comm) : comm_(comm) {
  DI_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DI_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

World::HostRanks World::host_ranks() const {
  MPI_Comm local;
  DI_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  HostRanks host;
  MPI_Comm_rank(local, &host.rank);
  MPI_Comm_size(local, &host.size);
  MPI_Comm_free(&local);
  return host;
}

void World::barrier(const char* what) const {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Ibarrier(comm_, &request));
  wait_or_abort(request, comm_, default_comm_timeout_s(), fmt::format("barrier '{}' (world of {})", what, size_));
}

double World::max_over_ranks(double value, const char* what) const {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, comm_, &request));
  wait_or_abort(request, comm_, default_comm_timeout_s(), fmt::format("all-reduce '{}' (world of {})", what, size_));
  return value;
}

void World::sum_over_ranks(double* values, int count, const char* what) const {
  MPI_Request request;
  DI_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, comm_, &request));
  wait_or_abort(request, comm_, default_comm_timeout_s(), fmt::format("all-reduce '{}' (world of {})", what, size_));
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  const std::string full(text, len);
  return full.substr(0, full.find(','));
}

}  // namespace deepinfer
