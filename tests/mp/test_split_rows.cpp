// fetch_split_rows (comm/split_rows.h) on random asks: every rank asks random rows of a table held in parts
// (model/row_shard.h), some ranks none, repeats and any order; each row's bytes are a function of its key, so
// every rank checks what it got without a reference copy.
#include <random>
#include <vector>

#include "src/comm/mpi_communicator.h"
#include "src/comm/split_rows.h"
#include "src/model/row_shard.h"
#include "tests/mp/mpi_test_util.h"

namespace deepinfer {
namespace {

std::byte byte_of(int64_t key, int64_t i) { return static_cast<std::byte>((key * 131 + i * 7 + 3) & 0xff); }

TEST(SplitRows, EveryRankGetsTheRowsItAsksForFromTheirHolders) {
  MpiCommunicator comm(MPI_COMM_WORLD, 120.0);
  const int size = comm.size(), rank = comm.rank();
  std::mt19937 rng(17 + 7919 * rank);
  for (const int64_t table_rows : {int64_t{1}, int64_t{size - 1 > 0 ? size - 1 : 1}, int64_t{1000}, int64_t{4078}}) {
    for (const int64_t row_bytes : {int64_t{1}, int64_t{264}}) {
      const RowShard shard{rank, size};
      const int64_t n = rank == 1 ? 0 : static_cast<int64_t>(rng() % 300);  // rank 1 asks for nothing
      std::vector<int64_t> keys(n);
      std::vector<int32_t> owners(n);
      for (int64_t i = 0; i < n; ++i) {
        keys[i] = static_cast<int64_t>(rng() % table_rows);
        owners[i] = static_cast<int32_t>(shard.owner(keys[i], table_rows));
      }
      int64_t served = 0;
      bool served_own = true;
      const auto serve = [&](std::span<const int64_t> asked, std::byte* out) {
        for (size_t j = 0; j < asked.size(); ++j) {
          served_own &= asked[j] >= shard.first(table_rows) && asked[j] < shard.first(table_rows) + shard.count(table_rows);
          for (int64_t b = 0; b < row_bytes; ++b) out[j * row_bytes + b] = byte_of(asked[j], b);
        }
        served += static_cast<int64_t>(asked.size());
      };
      std::vector<std::byte> got(n * row_bytes);
      fetch_split_rows(comm, keys, owners, row_bytes, serve, got.data(), "test rows");
      bool ok = served_own;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t b = 0; b < row_bytes; ++b) ok &= got[i * row_bytes + b] == byte_of(keys[i], b);
      // Every ask was served once somewhere.
      int64_t totals[2] = {n, served};
      comm.all_reduce_sum(totals, 2, DType::kI64, "test totals");
      EXPECT_TRUE(testing::all_ranks(ok && totals[0] == totals[1]))
          << "rank " << rank << ", table of " << table_rows << " rows, " << row_bytes << " bytes a row";
    }
  }
}

}  // namespace
}  // namespace deepinfer
