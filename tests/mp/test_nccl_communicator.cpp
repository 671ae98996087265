// The NCCL communicator (through host staging) against the MPI one on the same random exchanges: all-to-all
// with per-peer counts (zeros included), all-gather, all-reduce, broadcast. Needs a GPU per rank; skipped
// otherwise (CI), and at one rank per GPU it is the only multi-process NCCL check this machine allows.
#ifdef DEEPINFER_HAVE_CUDA
#include <random>

#include "src/core/device.h"
#include "src/comm/mpi_communicator.h"
#include "src/comm/nccl_communicator.h"
#include "tests/mp/mpi_test_util.h"

namespace deepinfer {
namespace {

TEST(NcclCommunicator, MatchesMpiOnRandomExchanges) {
  const int gpu = testing::own_gpu_or_none();
  if (gpu < 0) GTEST_SKIP() << "needs one GPU per rank";
  DI_CUDA_CHECK(cudaSetDevice(gpu));

  MpiCommunicator mpi(MPI_COMM_WORLD, 120.0);
  NcclCommunicator nccl(MPI_COMM_WORLD, 120.0);
  HostStagedCommunicator staged(nccl);
  const int n = mpi.size(), me = mpi.rank();
  std::mt19937 rng(17 + me);
  std::vector<int64_t> send_counts(n), recv_counts(n);
  for (int p = 0; p < n; ++p) send_counts[p] = (me + p) % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 1000);
  mpi.all_to_all_v(send_counts.data(), std::vector<int64_t>(n, 1), recv_counts.data(), std::vector<int64_t>(n, 1),
                   DType::kI64, "counts");
  int64_t send_total = 0, recv_total = 0;
  for (int p = 0; p < n; ++p) send_total += send_counts[p], recv_total += recv_counts[p];
  std::vector<float> send(send_total);
  for (float& v : send) v = std::normal_distribution<float>()(rng);
  std::vector<float> via_mpi(recv_total), via_nccl(recv_total, -1.0f);
  mpi.all_to_all_v(send.data(), send_counts, via_mpi.data(), recv_counts, DType::kF32, "mpi a2a");
  staged.all_to_all_v(send.data(), send_counts, via_nccl.data(), recv_counts, DType::kF32, "nccl a2a");
  EXPECT_EQ(via_mpi, via_nccl);

  std::vector<int64_t> mine = {me, 10 * me + 1}, gathered_mpi(2 * n), gathered_nccl(2 * n);
  mpi.all_gather(mine.data(), gathered_mpi.data(), 2, DType::kI64, "mpi gather");
  staged.all_gather(mine.data(), gathered_nccl.data(), 2, DType::kI64, "nccl gather");
  EXPECT_EQ(gathered_mpi, gathered_nccl);

  std::vector<int64_t> sum_mpi = {me, 1}, sum_nccl = {me, 1};
  mpi.all_reduce_sum(sum_mpi.data(), 2, DType::kI64, "mpi sum");
  staged.all_reduce_sum(sum_nccl.data(), 2, DType::kI64, "nccl sum");
  EXPECT_EQ(sum_mpi, sum_nccl);
  int64_t max_nccl = me;
  staged.all_reduce_max(&max_nccl, 1, DType::kI64, "nccl max");
  EXPECT_EQ(max_nccl, n - 1);

  std::vector<int64_t> value = {me == 0 ? 42 : 0, me == 0 ? 7 : 0};
  staged.broadcast(value.data(), 2, DType::kI64, 0, "nccl broadcast");
  EXPECT_EQ(value, (std::vector<int64_t>{42, 7}));
  staged.barrier("nccl barrier");
  nccl.finalize();
  EXPECT_TRUE(testing::all_ranks(!::testing::Test::HasFailure()));
}

}  // namespace
}  // namespace deepinfer
#endif
