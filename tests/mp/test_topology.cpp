// Roles and communicator sizes under mpirun, for the deployment named by DEEPINFER_TEST_DEPLOY.
#include <cstdlib>

#include "src/comm/topology.h"
#include "tests/mp/mpi_test_util.h"

namespace deepinfer {
namespace {

Deployment test_deployment() {
  const char* path = std::getenv("DEEPINFER_TEST_DEPLOY");
  if (path == nullptr) throw std::runtime_error("DEEPINFER_TEST_DEPLOY is not set");
  return Deployment::from_toml_file(path);
}

TEST(Topology, RolesAndCommunicatorsMatchTheDeployment) {
  const Deployment deployment = test_deployment();
  ASSERT_EQ(deployment.world_size(), testing::world_size());
  Topology topo = Topology::create(deployment, MPI_COMM_WORLD);
  const RoleSpec& spec = topo.role_spec();

  // Role by rank range: the first role's ranks come first.
  int first_rank_of_role = 0;
  for (int idx = 0; idx < topo.placement().role_spec_idx; ++idx)
    first_rank_of_role += deployment.roles[idx].num_ranks;
  bool ok = true;
  ok &= topo.world_rank() - first_rank_of_role == topo.placement().rank_in_role;
  ok &= topo.role_comm().size() == spec.num_ranks;
  ok &= topo.role_comm().rank() == topo.placement().rank_in_role;
  ok &= topo.ep_comm().size() == spec.ep_size;
  ok &= topo.ep_comm().rank() == topo.placement().rank_in_ep_group;
  ok &= topo.local_comm().size() >= 1 && topo.local_rank() < topo.local_comm().size();
  EXPECT_TRUE(ok) << "rank " << topo.world_rank() << " (" << role_name(topo.role()) << ")";

  // Count ranks per role across the world: they must equal the deployment's numbers.
  std::vector<int> counts(deployment.roles.size(), 0);
  counts[topo.placement().role_spec_idx] = 1;
  MPI_Allreduce(MPI_IN_PLACE, counts.data(), static_cast<int>(counts.size()), MPI_INT, MPI_SUM,
                MPI_COMM_WORLD);
  for (size_t idx = 0; idx < counts.size(); ++idx) EXPECT_EQ(counts[idx], deployment.roles[idx].num_ranks);

  // Sum of world ranks over each EP group equals the arithmetic series of its members: groups are
  // contiguous blocks of ep_size ranks inside the role.
  int sum = topo.world_rank();
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, topo.ep_comm().get());
  const int group_first = first_rank_of_role + topo.placement().ep_group_idx * spec.ep_size;
  const int expected = spec.ep_size * group_first + spec.ep_size * (spec.ep_size - 1) / 2;
  EXPECT_TRUE(testing::all_ranks(sum == expected));
  topo.finalize();
}

}  // namespace
}  // namespace deepinfer
