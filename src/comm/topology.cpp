#include "src/comm/topology.h"

#include "src/core/check.h"
#include "src/core/device.h"

namespace deepinfer {

int MpiComm::rank() const {
  int rank = 0;
  DI_MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  return rank;
}

int MpiComm::size() const {
  int size = 0;
  DI_MPI_CHECK(MPI_Comm_size(comm_, &size));
  return size;
}

void MpiComm::free() {
  if (comm_ != MPI_COMM_NULL) DI_MPI_CHECK(MPI_Comm_free(&comm_));
}

void Topology::check_world_size(const Deployment& deployment, int world_size) {
  std::string layout;
  for (const RoleSpec& spec : deployment.roles)
    layout += fmt::format("{}{} {}", layout.empty() ? "" : " + ", spec.num_ranks, role_name(spec.role));
  DI_INPUT_CHECK(world_size == deployment.world_size(),
                 "world size {} does not fit deployment '{}', which needs {} ranks ({}); launch with "
                 "mpirun -np {}", world_size, deployment.name, deployment.world_size(), layout,
                 deployment.world_size());
}

Topology Topology::create(const Deployment& deployment, MPI_Comm world) {
  Topology topo;
  topo.deployment_ = deployment;
  topo.world_ = world;
  DI_MPI_CHECK(MPI_Comm_rank(world, &topo.world_rank_));
  DI_MPI_CHECK(MPI_Comm_size(world, &topo.world_size_));
  check_world_size(deployment, topo.world_size_);
  topo.placement_ = place_rank(deployment, topo.world_rank_);

  MPI_Comm comm = MPI_COMM_NULL;
  DI_MPI_CHECK(MPI_Comm_split(world, topo.placement_.role_spec_idx, topo.world_rank_, &comm));
  topo.role_comm_ = MpiComm(comm);
  // EP groups are numbered within a role; the colour makes them unique across roles.
  const int ep_colour = topo.placement_.role_spec_idx * (1 << 20) + topo.placement_.ep_group_idx;
  DI_MPI_CHECK(MPI_Comm_split(world, ep_colour, topo.world_rank_, &comm));
  topo.ep_comm_ = MpiComm(comm);
  // SHARED splitting finds the ranks of one host under mpirun and srun alike (no launcher variables).
  DI_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, topo.world_rank_, MPI_INFO_NULL, &comm));
  topo.local_comm_ = MpiComm(comm);
  topo.local_rank_ = topo.local_comm_.rank();
  topo.local_size_ = topo.local_comm_.size();

  char host[MPI_MAX_PROCESSOR_NAME];
  int host_len = 0;
  DI_MPI_CHECK(MPI_Get_processor_name(host, &host_len));
  topo.host_.assign(host, host_len);

  const int num_gpus = cuda_device_count();
  topo.gpu_ = num_gpus > 0 ? topo.local_rank_ % num_gpus : -1;
  return topo;
}

void Topology::finalize() {
  local_comm_.free();
  ep_comm_.free();
  role_comm_.free();
}

}  // namespace deepinfer
