#include "tests/mp/mpi_test_util.h"

#include "src/core/device.h"

namespace deepinfer::testing {

int own_gpu_or_none() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_size = 1, local_rank = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  return all_ranks(cuda_device_count() >= local_size) ? local_rank : -1;
}

}  // namespace deepinfer::testing
