// The routed-expert kernels of a decode step at DeepSeek-V2-Lite shape, alone, against read ceilings measured
// in the same process: where the grouped kernel stands against the copy rate, and how much of the gap is the
// order in which it reads weights rather than its arithmetic.
//
//   moe_grouped_bench [--tokens 256] [--experts 64] [--top-k 6] [--hidden 2048] [--inter 1408] [--reps 20]
//
// Prints, for each, the median of --reps runs after 3 warm-up runs (CUDA events), the bytes it must read and
// the rate: the grouped expert kernel (moe_grouped.cuh, both projections) on a routing of --tokens tokens drawn
// uniformly; a plain streaming read of the gate/up weights (the device's read ceiling); the same weights read
// through shared memory the way a tiled kernel does, 16 KiB a stage, by tiles of 16384 / B rows x B bytes for
// B = 128 ... 4096 (cp.async); through the copy engine (tensor boxes, as the grouped kernel reads); and straight
// into registers in tensor-core fragment order.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/microbench.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/tma.cuh"
#include "src/core/check.h"

namespace {

// Streaming read: every thread keeps four 16-byte loads in flight; the XOR keeps the loads alive.
__global__ void read_kernel(const uint4* data, size_t count, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < count; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < count; i += stride) acc ^= data[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

// Tiled read through shared memory, as the grouped kernel stages weights: 128 threads, two blocks an SM, four
// 16 KiB stages; an item is kTileRows rows of the [rows, k] matrix over all of k, read kRowBytes of each row a
// stage; items go round robin over a persistent grid.
template <int kRowBytes>
__global__ void __launch_bounds__(128, 2) tiled_read_kernel(const __nv_bfloat16* w, int64_t rows, int64_t k,
                                                            unsigned* sink) {
  constexpr int kStageBytes = 16384, kStages = 4, kTileRows = kStageBytes / kRowBytes;
  constexpr int kPieces = kStageBytes / 16 / 128;  // 16-byte copies a thread issues a stage
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t row_bytes = k * 2, stages_per_item = row_bytes / kRowBytes;
  const int64_t items = rows / kTileRows, total = (items - 1 - blockIdx.x) / gridDim.x + 1;
  const int64_t steps = blockIdx.x < items ? total * stages_per_item : 0;
  auto issue = [&](int64_t step) {
    const int64_t item = blockIdx.x + (step / stages_per_item) * gridDim.x, s = step % stages_per_item;
    const auto* base = reinterpret_cast<const unsigned char*>(w) + item * kTileRows * row_bytes + s * kRowBytes;
    unsigned char* dst = smem + (step % kStages) * kStageBytes;
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      const int piece = threadIdx.x + 128 * p;  // 16-byte piece of the stage: row piece / (kRowBytes / 16)
      const int r = piece / (kRowBytes / 16), c = piece % (kRowBytes / 16);
      deepinfer::cuda::cp_async_16_stream(dst + 16 * piece, base + r * row_bytes + 16 * c, true);
    }
  };
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) issue(s);
    deepinfer::cuda::cp_async_commit();
  }
  unsigned acc = 0;
  for (int64_t step = 0; step < steps; ++step) {
    deepinfer::cuda::cp_async_wait<kStages - 2>();
    __syncthreads();
    if (step + kStages - 1 < steps) issue(step + kStages - 1);
    deepinfer::cuda::cp_async_commit();
    acc ^= reinterpret_cast<const unsigned*>(smem + (step % kStages) * kStageBytes)[threadIdx.x];
  }
  deepinfer::cuda::cp_async_wait<0>();
  if (acc == 0x12345678u) *sink = acc;
}

// The copy engine's read rate on its own, in the grouped kernel's order: one copy warp streams boxes of
// kBoxRows rows x 128 bytes (one k step of 64 bf16 columns, 128-byte swizzled, as the kernel's tensor maps) into
// kStages shared-memory stages that complete on mbarriers; four warps only wait for each stage and release it.
// Items of kBoxRows rows over all of k go round robin over a persistent grid of kBlocksPerSM blocks an SM.
template <int kBoxRows, int kBoxes, int kStages, int kBlocksPerSM>
__global__ void __launch_bounds__(160, kBlocksPerSM)
    tma_read_kernel(const __grid_constant__ CUtensorMap map, int64_t rows, int64_t k, unsigned* sink) {
  namespace dc = deepinfer::cuda;
  constexpr int kStageBytes = kBoxes * kBoxRows * 128;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) dc::mbarrier_init(&full[s], 1), dc::mbarrier_init(&empty[s], 4);
    dc::fence_barrier_init();
  }
  __syncthreads();
  const int64_t items = rows / kBoxRows, k_tiles = k / (64 * kBoxes);
  const int64_t mine = blockIdx.x < items ? (items - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int64_t steps = mine * k_tiles;
  if (warp == 4) {
    if (lane != 0) return;
    for (int64_t step = 0; step < steps; ++step) {
      const int slot = static_cast<int>(step % kStages);
      if (step >= kStages) dc::mbarrier_wait(&empty[slot], static_cast<unsigned>((step / kStages - 1) & 1), "tma_read");
      const int64_t item = blockIdx.x + (step / k_tiles) * gridDim.x;
      dc::mbarrier_arrive_expect_tx(&full[slot], kStageBytes);
      for (int box = 0; box < kBoxes; ++box)
        dc::tma_load_3d(smem + slot * kStageBytes + box * kBoxRows * 128, &map,
                        static_cast<int>(((step % k_tiles) * kBoxes + box) * 64), static_cast<int>(item * kBoxRows), 0,
                        &full[slot]);
    }
    return;
  }
  unsigned acc = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const int slot = static_cast<int>(step % kStages);
    dc::mbarrier_wait(&full[slot], static_cast<unsigned>((step / kStages) & 1), "tma_read");
    acc ^= reinterpret_cast<const unsigned*>(smem + slot * kStageBytes)[threadIdx.x];
    __syncwarp();
    if (lane == 0) dc::mbarrier_arrive(&empty[slot]);
  }
  if (acc == 0x12345678u) *sink = acc;
}

// Weights read straight into registers in the order tensor-core fragments would take them (no shared memory):
// a warp streams kNTiles x 8 rows of the [rows, k] matrix over all of k, lane (g, t) the 16 bytes at k0 + 8t of
// row g of each 8-row tile (k0 steps by 32), kBatch steps in flight; items of kNTiles x 8 rows go round robin over
// every warp of a persistent grid of 4-warp blocks, kBlocksPerSM blocks an SM.
template <int kNTiles, int kBatch, int kBlocksPerSM>
__global__ void __launch_bounds__(128, kBlocksPerSM)
    fragment_read_kernel(const __nv_bfloat16* w, int64_t rows, int64_t k, unsigned* sink) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * 4, warp = blockIdx.x * 4 + threadIdx.x / 32;
  const int64_t items = rows / (kNTiles * 8), chunks = k / 32;
  unsigned acc = 0;
  for (int64_t item = warp; item < items; item += warps) {
    const uint4* row[kNTiles];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
      row[j] = reinterpret_cast<const uint4*>(w + ((item * kNTiles + j) * 8 + g) * k) + t;
    for (int64_t c = 0; c < chunks; c += kBatch) {
      uint4 v[kNTiles][kBatch];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int b = 0; b < kBatch; ++b) v[j][b] = __ldcs(row[j] + (c + b) * 4);
#pragma unroll
      for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int b = 0; b < kBatch; ++b) acc ^= v[j][b].x ^ v[j][b].w;
    }
  }
  if (acc == 0x12345678u) *sink = acc;
}

struct Options {
  int tokens = 256, experts = 64, top_k = 6, hidden = 2048, inter = 1408, reps = 20;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--tokens") o.tokens = value;
    else if (flag == "--experts") o.experts = value;
    else if (flag == "--top-k") o.top_k = value;
    else if (flag == "--hidden") o.hidden = value;
    else if (flag == "--inter") o.inter = value;
    else if (flag == "--reps") o.reps = value;
    else {
      std::fprintf(stderr, "moe_grouped_bench: unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

void report(const char* what, float ms, double bytes) {
  std::printf("%-44s %9.1f us %9.1f MB %8.2f TB/s\n", what, ms * 1e3, bytes / 1e6, bytes / (ms * 1e-3) / 1e12);
}

template <int kRowBytes>
void tiled_read(const __nv_bfloat16* w, int64_t rows, int64_t k, int sms, unsigned* sink, int reps) {
  constexpr size_t kShared = 4 * 16384;
  DI_CUDA_CHECK(cudaFuncSetAttribute(tiled_read_kernel<kRowBytes>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(kShared)));
  const float ms = median_ms(reps, [&] { tiled_read_kernel<kRowBytes><<<2 * sms, 128, kShared>>>(w, rows, k, sink); });
  const std::string what = "tiled read, " + std::to_string(16384 / kRowBytes) + " rows x " +
                           std::to_string(kRowBytes) + " B a stage";
  report(what.c_str(), ms, static_cast<double>(rows) * k * 2);
}

template <int kBoxRows, int kBoxes, int kStages, int kBlocksPerSM>
void tma_read(const __nv_bfloat16* w, int64_t rows, int64_t k, int sms, unsigned* sink, int reps) {
  constexpr size_t kShared = kStages * (kBoxes * kBoxRows * 128 + 2 * sizeof(uint64_t));
  constexpr auto kernel = tma_read_kernel<kBoxRows, kBoxes, kStages, kBlocksPerSM>;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared)));
  CUtensorMap map;
  DI_CHECK(deepinfer::cuda::make_bf16_tensor_map(&map, w, 1, static_cast<uint64_t>(rows), static_cast<uint64_t>(k), 1,
                                                 kBoxRows, 64) == CUDA_SUCCESS,
           "tensor map");
  const float ms = median_ms(reps, [&] { kernel<<<kBlocksPerSM * sms, 160, kShared>>>(map, rows, k, sink); });
  const std::string what = "copy engine, " + std::to_string(kBoxRows) + " rows x " + std::to_string(kBoxes) +
                           " x 128 B, " + std::to_string(kStages) + " stages, " + std::to_string(kBlocksPerSM) +
                           " blocks an SM";
  report(what.c_str(), ms, static_cast<double>(rows) * k * 2);
}

template <int kNTiles, int kBatch, int kBlocksPerSM>
void fragment_read(const __nv_bfloat16* w, int64_t rows, int64_t k, int sms, unsigned* sink, int reps) {
  constexpr auto kernel = fragment_read_kernel<kNTiles, kBatch, kBlocksPerSM>;
  const float ms = median_ms(reps, [&] { kernel<<<kBlocksPerSM * sms, 128>>>(w, rows, k, sink); });
  const std::string what = "fragment order, " + std::to_string(kNTiles * 8) + " rows a warp, " +
                           std::to_string(kBatch) + " steps in flight, " + std::to_string(kBlocksPerSM) +
                           " x 4 warps an SM";
  report(what.c_str(), ms, static_cast<double>(rows) * k * 2);
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; %d tokens x top-%d of %d experts, hidden %d, inter %d\n", prop.name, sms, o.tokens,
              o.top_k, o.experts, o.hidden, o.inter);

  // Routing: each token picks top_k distinct experts uniformly; rows sorted by expert.
  std::mt19937 rng(7);
  std::vector<std::vector<int>> rows_of(o.experts);
  for (int t = 0; t < o.tokens; ++t) {
    std::vector<int> all(o.experts);
    for (int e = 0; e < o.experts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int j = 0; j < o.top_k; ++j) rows_of[all[j]].push_back(t);
  }
  std::vector<int32_t> offsets(o.experts + 1, 0), token_of_row;
  for (int e = 0; e < o.experts; ++e) {
    offsets[e + 1] = offsets[e] + static_cast<int32_t>(rows_of[e].size());
    token_of_row.insert(token_of_row.end(), rows_of[e].begin(), rows_of[e].end());
  }
  const int pairs = offsets[o.experts];
  const auto [min_rows, max_rows] = std::minmax_element(rows_of.begin(), rows_of.end(),
                                                        [](auto& a, auto& b) { return a.size() < b.size(); });
  std::printf("rows an expert: %zu .. %zu (mean %.1f)\n", min_rows->size(), max_rows->size(),
              static_cast<double>(pairs) / o.experts);

  const size_t gate_up_elems = static_cast<size_t>(o.experts) * 2 * o.inter * o.hidden;
  const size_t down_elems = static_cast<size_t>(o.experts) * o.hidden * o.inter;
  __nv_bfloat16 *gate_up, *down, *x, *act, *y;
  int32_t *d_offsets, *d_token_of_row;
  unsigned* sink;
  DI_CUDA_CHECK(cudaMalloc(&gate_up, gate_up_elems * 2));
  DI_CUDA_CHECK(cudaMalloc(&down, down_elems * 2));
  DI_CUDA_CHECK(cudaMalloc(&x, static_cast<size_t>(o.tokens) * o.hidden * 2));
  DI_CUDA_CHECK(cudaMalloc(&act, static_cast<size_t>(pairs) * o.inter * 2));
  DI_CUDA_CHECK(cudaMalloc(&y, static_cast<size_t>(pairs) * o.hidden * 2));
  DI_CUDA_CHECK(cudaMalloc(&d_offsets, offsets.size() * 4));
  DI_CUDA_CHECK(cudaMalloc(&d_token_of_row, token_of_row.size() * 4));
  DI_CUDA_CHECK(cudaMalloc(&sink, 4));
  // 0x3c3c: bf16 0.0115, finite and the same everywhere (the rates do not depend on the values).
  DI_CUDA_CHECK(cudaMemset(gate_up, 0x3c, gate_up_elems * 2));
  DI_CUDA_CHECK(cudaMemset(down, 0x3c, down_elems * 2));
  DI_CUDA_CHECK(cudaMemset(x, 0x3c, static_cast<size_t>(o.tokens) * o.hidden * 2));
  DI_CUDA_CHECK(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
  DI_CUDA_CHECK(cudaMemcpy(d_token_of_row, token_of_row.data(), token_of_row.size() * 4, cudaMemcpyHostToDevice));

  const double gate_up_bytes = static_cast<double>(gate_up_elems) * 2, down_bytes = static_cast<double>(down_elems) * 2;
  int32_t* sync_words;
  const size_t sync_bytes = deepinfer::cuda::moe_grouped_sync_ints(o.experts) * sizeof(int32_t);
  DI_CUDA_CHECK(cudaMalloc(&sync_words, sync_bytes));
  DI_CUDA_CHECK(cudaMemset(sync_words, 0, sync_bytes));
  const float ms = median_ms(o.reps, [&] {
    DI_CUDA_CHECK(deepinfer::cuda::moe_grouped_experts(x, d_token_of_row, d_offsets, o.experts, o.hidden, o.inter,
                                                     gate_up, down, 0.0f, act, y, sync_words, sms, 0));
  });
  report("moe_grouped_experts (gate/up and down)", ms, gate_up_bytes + down_bytes);

  const size_t vectors = gate_up_elems * 2 / 16;
  for (int blocks_per_sm : {2, 4, 8}) {
    const float ms = median_ms(o.reps, [&] {
      read_kernel<<<blocks_per_sm * sms, 256>>>(reinterpret_cast<const uint4*>(gate_up), vectors, sink);
    });
    const std::string what = "streaming read, " + std::to_string(blocks_per_sm) + " x 256 threads an SM";
    report(what.c_str(), ms, gate_up_bytes);
  }
  const int64_t rows = 2LL * o.experts * o.inter;
  tiled_read<128>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tiled_read<256>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tiled_read<512>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tiled_read<1024>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tiled_read<4096>(gate_up, rows, o.hidden, sms, sink, o.reps);
  // Measured at 64 tokens (results/h200/moe_grouped_bench.txt): the copy engine in the kernel's order reads at
  // 4.09-4.20 TB/s whatever the depth (4 or 12 stages, 1 or 2 blocks an SM), longer runs of a row a stage are
  // slower (64 x 2, 32 x 4, 16 x 8 boxes of 128 B: 3.98-4.00, 8 x 16: 3.89), and reading the weights straight
  // into registers in fragment order reaches 4.24 at best (2 x 4 warps an SM; 4 x 4 warps 3.56), where the
  // plain streaming read above reaches 4.43: the grouped kernel (4.05-4.09 at 64 tokens) is within 2% of its
  // order's ceiling.
  tma_read<128, 1, 4, 2>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tma_read<128, 1, 12, 1>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tma_read<64, 2, 4, 2>(gate_up, rows, o.hidden, sms, sink, o.reps);
  tma_read<8, 16, 4, 2>(gate_up, rows, o.hidden, sms, sink, o.reps);
  fragment_read<4, 4, 2>(gate_up, rows, o.hidden, sms, sink, o.reps);
  fragment_read<4, 4, 4>(gate_up, rows, o.hidden, sms, sink, o.reps);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("moe_grouped_bench", run, argc, argv); }
