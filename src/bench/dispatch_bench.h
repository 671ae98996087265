// The expert-parallel exchange on its own, nccl-tests style (collective over the world, one GPU per rank,
// EP = world size): for each (tokens per rank, hidden, top-k), random routing over `experts` experts placed
// evenly, the median time of the engine's dispatch (layout, counts, pack, all-to-all, unpack) and combine
// (all-to-all, weighted add), and of one plain ncclAlltoAll moving the same bytes per rank. The slowest rank's
// median is reported. size = bytes a rank sends (records for dispatch, bf16 rows for combine, itself included);
// algbw = size / time; busbw = algbw * (ranks - 1) / ranks (nccl-tests' all-to-all convention).
#pragma once

#include "src/comm/world.h"

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

struct DispatchBenchOptions {
  std::vector<int64_t> tokens = {128, 4096};  // per rank: decode-like, prefill-like
  std::vector<int64_t> hiddens = {2048, 7168};
  std::vector<int64_t> top_ks = {6, 8};
  int64_t warmup = 5;
  int64_t iters = 20;
};

struct DispatchBenchRow {
  int ranks = 0;
  int64_t tokens = 0, hidden = 0, top_k = 0, experts = 0;
  std::string op;  // "dispatch", "combine", or "ncclAlltoAll" of the bytes of the row above
  double bytes = 0, median_us = 0, algbw_gbs = 0, busbw_gbs = 0;
};

// The experts of a top-k: 64 for top-6 (DeepSeek-V2-Lite), 256 otherwise (V3's 256 for top-8).
int64_t experts_for_top_k(int64_t top_k);

std::vector<DispatchBenchRow> run_dispatch_bench(const World& world, int gpu, const DispatchBenchOptions& options);

}  // namespace deepinfer
