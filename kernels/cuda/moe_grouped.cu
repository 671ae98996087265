#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/tma.cuh"

namespace deepinfer::cuda {

namespace {

// Two blocks an SM, each four MMA warps and one copy warp. The copy warp streams the weights through the copy
// engine (one tensor box a stage: 64 gate and the matching 64 up rows, or 128 rows) and the x rows with
// cp.async, into kStages shared-memory stages that complete on mbarriers; the MMA warps wait on a stage's
// barrier, compute, and release it on another. Its predecessor copied with cp.async from every thread, a
// __syncthreads a stage, and its loads' instructions, not the arithmetic, were the cost
// (results/h200/design-measurements.md).
constexpr int kTileK = 64;            // reduction depth of one stage: 128 bytes of a row, the swizzle's width
constexpr int kMaxRows = 64;          // expert rows of one work item (four 16-row MMA tiles)
constexpr int kXStride = kTileK + 8;  // x rows padded to 144 bytes: ldmatrix rows land 4 banks apart

// The pipeline's shape: MMA warps a block, blocks an SM, stages a block, weight rows of a work item (output
// columns, or with SwiGLU half gate and half up rows).
template <int kMmaWarpsT, int kBlocksPerSMT, int kStagesT, int kTileRowsT>
struct Shape {
  static constexpr int kMmaWarps = kMmaWarpsT, kBlocksPerSM = kBlocksPerSMT, kStages = kStagesT;
  static constexpr int kTileRows = kTileRowsT;
  static constexpr int kThreads = (kMmaWarps + 1) * 32;          // the copy warp last
  static constexpr int kWarpTiles = kTileRows / kMmaWarps / 8;  // 8-row MMA n-tiles of weight rows a warp takes
  static constexpr int kWeightBytes = kTileRows * kTileK * 2;
  // Weights, then x rows; every stage's weights start 1024-byte aligned (the 128-byte swizzle's period).
  static constexpr int kStageBytes = (kWeightBytes + kMaxRows * kXStride * 2 + 1023) / 1024 * 1024;
  static constexpr size_t kSharedBytes = static_cast<size_t>(kStages) * kStageBytes + 2 * kStages * sizeof(uint64_t);
  static_assert(kWarpTiles % 2 == 0 && kWeightBytes % 1024 == 0, "n-tile pairs a warp; whole swizzle periods");
};

// One work item: up to 64 rows of one expert (a "pass") against one tile of its weight rows.
struct Item {
  int64_t first_row;  // in x and out
  int rows;
  int col0;           // first output column
  int expert;
};

// Item `item` of the enumeration (expert, pass, column tile), pass_prefix[e] being the passes of experts < e.
__device__ Item decode_item(int item, const int* pass_prefix, int num_experts, const int32_t* offsets, int n_tiles,
                            int cols) {
  const int expert_pass = item / n_tiles, tile = item % n_tiles;
  int lo = 0, hi = num_experts;  // the last expert whose passes start at or before expert_pass
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (pass_prefix[mid] <= expert_pass) lo = mid;
    else hi = mid;
  }
  Item it;
  it.first_row = offsets[lo] + static_cast<int64_t>(expert_pass - pass_prefix[lo]) * kMaxRows;
  it.rows = static_cast<int>(min(static_cast<int64_t>(kMaxRows), offsets[lo + 1] - it.first_row));
  it.col0 = tile * cols;
  it.expert = lo;
  return it;
}


// One stage of an MMA warp for an item of kMTiles 16-row tiles: straight-line code (no run-time trip count), so
// the compiler can issue every ldmatrix of the stage ahead of the MMAs that need it.
template <int kMTiles, int kWarpTiles>
__device__ __forceinline__ void mma_stage(float (&acc)[kMaxRows / 16][kWarpTiles][4], const unsigned char* stage,
                                          const int (&b_row_bytes)[kWarpTiles / 2], int b_piece, int b_swizzle,
                                          int a_offset) {
#pragma unroll
  for (int kk = 0; kk < kTileK; kk += 16) {
    uint32_t b[kWarpTiles / 2][4];
    const int piece = ((kk / 8 + b_piece) ^ b_swizzle) * 16;
#pragma unroll
    for (int h = 0; h < kWarpTiles / 2; ++h) ldmatrix_x4(b[h], stage + b_row_bytes[h] + piece);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      uint32_t a[4];
      ldmatrix_x4(a, stage + a_offset + (mt * 16 * kXStride + kk) * 2);
#pragma unroll
      for (int n = 0; n < kWarpTiles; ++n)
        mma_bf16(acc[mt][n], a[0], a[1], a[2], a[3], b[n / 2][2 * (n % 2)], b[n / 2][2 * (n % 2) + 1]);
    }
  }
}

// The sync words (moe_grouped_sync_ints): the next unclaimed item, the blocks that have finished, then per
// expert how many (MMA warp, gate/up item) pairs have written their act columns.
constexpr int kNextItem = 0, kFinishedBlocks = 1, kGateUpDone = 2;
constexpr int kNoItem = -1;  // the copy warp's last stage: no item, the MMA warps stop

struct Problem {
  const __nv_bfloat16* x;
  const int32_t* token_of_row;  // x's row of each expert-sorted row
  const int32_t* offsets;
  int num_experts, hidden, inter;
  float swiglu_limit;  // clamp_swiglu's; 0: plain SwiGLU
  __nv_bfloat16* act;
  __nv_bfloat16* y;
  int32_t* sync;
};

// Waits (one thread) until the counter reaches `target`, reading it with acquire order so that what its
// raisers wrote before raising it is visible after. A wait of about 10 s of the SM's clock prints who waited
// for what and traps.
__device__ void wait_for_count(const int32_t* counter, int target, int expert) {
  const long long start = clock64();
  for (;;) {
    int count;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(count) : "l"(counter) : "memory");
    if (count >= target) return;
    __nanosleep(64);
    if (clock64() - start > 20'000'000'000LL) {
      printf("moe_grouped copy warp: block %d waited ~10 s for expert %d's gate/up items (%d of %d); trapping\n",
             blockIdx.x, expert, count, target);
      __trap();
    }
  }
}

// One persistent kernel for both projections. The work items are every gate/up item (expert, 64-row pass,
// 64 act columns: 64 gate and the matching 64 up rows), then every down item (expert, pass, 128 output
// columns); blocks claim them in that order from an atomic counter, so a block that finishes early takes more
// and the grid drains once, at the end, rather than once a projection with a launch between (the two kernels
// this replaced lost their tails to that; results/h200/design-measurements.md). A down item needs its expert's act rows
// whole: the copy warp waits until all of the expert's gate/up items are written (counted per MMA warp) before
// it copies them; items are claimed in order, so what it waits for is already running and the wait is short
// and cannot deadlock, whichever blocks are resident.
//
// Two blocks an SM, each four MMA warps and one copy warp. The copy warp streams the weights through the copy
// engine (one tensor box a stage) and the x (or act) rows with cp.async into kStages shared-memory stages that
// complete on mbarriers, and names in slot_item the item a stage starts; the MMA warps wait on a stage's
// barrier, compute, and release it on another, one pipeline through all of a block's items. MMAs are m16n8k16
// bf16; MMA warp w takes two 16-row slices of the item's weight rows, each one ldmatrix.x4 (two n-tiles) per k
// step: for gate/up, gate rows [16w, 16w + 16) and the matching up rows [64 + 16w, ...), so silu(gate) * up is
// formed in registers; for down, rows [32w, 32w + 32). Weights arrive 128-byte swizzled (tma.cuh): row r's
// 16-byte piece c at c ^ (r % 8). k not a multiple of 64: the tensor boxes and the x copies fill zeros past k.
template <class S, bool kClamp>
__global__ void __launch_bounds__(S::kThreads, S::kBlocksPerSM)
    experts_kernel(const __grid_constant__ CUtensorMap gate_up_map, const __grid_constant__ CUtensorMap down_map,
                   const Problem p) {
  constexpr int kMmaWarps = S::kMmaWarps, kStages = S::kStages, kThreads = S::kThreads;
  constexpr int kWarpTiles = S::kWarpTiles, kTileRows = S::kTileRows;
  constexpr int kWeightBytes = S::kWeightBytes, kStageBytes = S::kStageBytes;
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  auto* full = reinterpret_cast<uint64_t*>(shared_bytes + kStages * kStageBytes);  // [kStages]: stage landed
  uint64_t* empty = full + kStages;                                                 // [kStages]: stage released
  auto* slot_item = reinterpret_cast<int*>(empty + kStages);  // [kStages]: the item a stage starts, or kNoItem
  int* pass_prefix = slot_item + kStages;                     // [num_experts + 1]
  int* shared_offsets = pass_prefix + p.num_experts + 1;      // [num_experts + 1]: no global load an item
  const int num_experts = p.num_experts;
  for (int e = threadIdx.x; e <= num_experts; e += kThreads) shared_offsets[e] = p.offsets[e];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  if (threadIdx.x == 0) {  // full: the copy warp's 32 lanes (their x copies) and its lane 0's expected bytes
    for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 33), mbarrier_init(&empty[s], kMmaWarps);
    fence_barrier_init();
  }

  // Passes of up to 64 rows per expert, and their exclusive prefix (warp 0: lane l sums a run of experts).
  if (warp == 0) {
    const int per_lane = (num_experts + 31) / 32;
    auto passes = [&](int e) { return (p.offsets[e + 1] - p.offsets[e] + kMaxRows - 1) / kMaxRows; };
    int local = 0;
    for (int i = 0; i < per_lane; ++i)
      if (lane * per_lane + i < num_experts) local += passes(lane * per_lane + i);
    int inclusive = local;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += v;
    }
    int run = inclusive - local;
    for (int i = 0; i < per_lane; ++i) {
      const int e = lane * per_lane + i;
      if (e < num_experts) pass_prefix[e] = run, run += passes(e);
    }
    if (lane == 31) pass_prefix[num_experts] = inclusive;
  }
  __syncthreads();

  constexpr int kGateUpCols = kTileRows / 2, kDownCols = kTileRows;  // output columns of an item
  const int gate_up_tiles = (p.inter + kGateUpCols - 1) / kGateUpCols;
  const int down_tiles = (p.hidden + kDownCols - 1) / kDownCols;
  const int gate_up_items = pass_prefix[num_experts] * gate_up_tiles;
  const int total_items = gate_up_items + pass_prefix[num_experts] * down_tiles;
  auto is_down = [&](int id) { return id >= gate_up_items; };
  auto item_of = [&](int id) {
    if (is_down(id))
      return decode_item(id - gate_up_items, pass_prefix, num_experts, shared_offsets, down_tiles, kDownCols);
    return decode_item(id, pass_prefix, num_experts, shared_offsets, gate_up_tiles, kGateUpCols);
  };
  auto k_tiles_of = [&](bool down) { return ((down ? p.inter : p.hidden) + kTileK - 1) / kTileK; };

  if (warp == kMmaWarps) {  // the copy warp
    // Lane l copies 16-byte piece l % 8 of the item's x rows l / 8 + 4i; their row numbers in x are looked up
    // once an item, not once a stage.
    constexpr int kLaneRows = kMaxRows / 4;
    const int piece = 8 * (lane % 8);
    int64_t x_row[kLaneRows];
    int claimed = lane == 0 ? atomicAdd(p.sync + kNextItem, 1) : 0;
    int step = 0;
    for (;;) {
      const int id = __shfl_sync(0xffffffffu, claimed, 0);
      if (id >= total_items) break;
      if (lane == 0) claimed = atomicAdd(p.sync + kNextItem, 1);  // the next item, claimed while this one streams
      const bool down = is_down(id);
      const Item item = item_of(id);
      if (down && lane == 0) {
        const int passes = pass_prefix[item.expert + 1] - pass_prefix[item.expert];
        wait_for_count(p.sync + kGateUpDone + item.expert, kMmaWarps * gate_up_tiles * passes, item.expert);
      }
      __syncwarp();
      const __nv_bfloat16* x = down ? p.act : p.x;
      const int k_dim = down ? p.inter : p.hidden, k_tiles = k_tiles_of(down);
#pragma unroll
      for (int i = 0; i < kLaneRows; ++i) {
        const int r = lane / 8 + 4 * i;
        const int64_t row = item.first_row + r;
        x_row[i] = r < item.rows ? (down ? row : p.token_of_row[row]) : 0;
      }
      for (int kt = 0; kt < k_tiles; ++kt, ++step) {
        const int slot = step % kStages;
        if (step >= kStages) mbarrier_wait(&empty[slot], (step / kStages - 1) & 1, "moe_grouped copy warp");
        unsigned char* stage = shared_bytes + slot * kStageBytes;
        const int k = kt * kTileK;
        if (lane == 0) {
          if (kt == 0) slot_item[slot] = id;  // published by the arrival below (release order)
          mbarrier_arrive_expect_tx(&full[slot], kWeightBytes);
          // The weights as tensors: gate/up [E * 2, inter, hidden] (planes gate, up), one box of this k step's
          // columns of rows [col0, col0 + 64) of both planes; down [E, hidden, inter], rows [col0, col0 + 128).
          // Rows past the end fill zeros, so no box reads into the next expert. (Two 2-D boxes a stage measured
          // the same.)
          if (down) tma_load_3d(stage, &down_map, k, item.col0, item.expert, &full[slot]);
          else tma_load_3d(stage, &gate_up_map, k, item.col0, item.expert * 2, &full[slot]);
        }
        // The x rows: 16-byte cp.async pieces (zeros past k), the lanes taking pieces round robin. One bulk copy
        // a row was slower (the copy engine's cost is per copy, not per byte).
        const bool valid = k + piece < k_dim;
#pragma unroll
        for (int i = 0; i < kLaneRows; ++i) {
          const int r = lane / 8 + 4 * i;
          if (r >= item.rows) break;
          const __nv_bfloat16* src = x + x_row[i] * k_dim + k + piece;
          cp_async_16(stage + kWeightBytes + (r * kXStride + piece) * 2, valid ? src : x, valid);
        }
        cp_async_mbarrier_arrive(&full[slot]);
      }
    }
    // No item left: a stage that says so, its 33 arrivals plain ones.
    const int slot = step % kStages;
    if (step >= kStages) mbarrier_wait(&empty[slot], (step / kStages - 1) & 1, "moe_grouped copy warp");
    if (lane == 0) slot_item[slot] = kNoItem, mbarrier_arrive(&full[slot]);
    mbarrier_arrive(&full[slot]);
  } else {
    // The first weight row (within the tile) of the warp's n-tile n: for gate/up its gate n-tiles, then the up
    // n-tiles of the same columns; for down kWarpTiles consecutive n-tiles.
    auto tile_row = [&](int n, bool down) {
      constexpr int kHalf = kWarpTiles / 2;
      if (down) return 8 * (kWarpTiles * warp + n);
      return n < kHalf ? 8 * (kHalf * warp + n) : kGateUpCols + 8 * (kHalf * warp + n - kHalf);
    };
    // ldmatrix lane addresses: x4 number h loads n-tiles 2h and 2h + 1 (lane l: row (l & 7) of n-tile
    // 2h + l / 16, 16-byte piece (l / 8) % 2 of the k step, swizzled); the x rows (byte offsets within a stage).
    int b_row_bytes_of[2][kWarpTiles / 2];  // [down][x4]
#pragma unroll
    for (int down = 0; down < 2; ++down)
#pragma unroll
      for (int h = 0; h < kWarpTiles / 2; ++h)
        b_row_bytes_of[down][h] = (tile_row(2 * h + (lane >> 4), down) + (lane & 7)) * kTileK * 2;
    const int b_piece = (lane >> 3) & 1, b_swizzle = lane & 7;
    const int a_offset = kWeightBytes + (((lane & 7) + 8 * ((lane >> 3) & 1)) * kXStride + 8 * (lane >> 4)) * 2;

    float acc[kMaxRows / 16][kWarpTiles][4];  // [m-tile][n-tile][fragment]
    for (int step = 0;;) {
      mbarrier_wait(&full[step % kStages], (step / kStages) & 1, "moe_grouped MMA warp");
      const int id = slot_item[step % kStages];
      if (id == kNoItem) break;
      const bool down = is_down(id);
      const Item item = item_of(id);
      const int m_tiles = (item.rows + 15) / 16, k_tiles = k_tiles_of(down);
      int b_row_bytes[kWarpTiles / 2];
#pragma unroll
      for (int h = 0; h < kWarpTiles / 2; ++h) b_row_bytes[h] = down ? b_row_bytes_of[1][h] : b_row_bytes_of[0][h];
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt)
#pragma unroll
        for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
      for (int kt = 0; kt < k_tiles; ++kt, ++step) {
        const int slot = step % kStages;
        if (kt > 0) mbarrier_wait(&full[slot], (step / kStages) & 1, "moe_grouped MMA warp");
        const unsigned char* stage = shared_bytes + slot * kStageBytes;
        switch (m_tiles) {
          case 1: mma_stage<1>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
          case 2: mma_stage<2>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
          case 3: mma_stage<3>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
          default: mma_stage<4>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&empty[slot]);  // this warp is done with the stage
      }
      // The item's rows: act = silu(gate) * up, or y.
      const int n_out = down ? p.hidden : p.inter;
      __nv_bfloat16* out = down ? p.y : p.act;
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mt * 16 + g + 8 * half;
          if (mt >= m_tiles || r >= item.rows) continue;
          __nv_bfloat16* o = out + (item.first_row + r) * n_out;
          if (down) {
#pragma unroll
            for (int n = 0; n < kWarpTiles; ++n) {
              const int col = item.col0 + tile_row(n, true) + 2 * t;
              if (col >= n_out) continue;
              *reinterpret_cast<__nv_bfloat162*>(o + col) =
                  __floats2bfloat162_rn(acc[mt][n][2 * half], acc[mt][n][2 * half + 1]);
            }
          } else {
#pragma unroll
            for (int n = 0; n < kWarpTiles / 2; ++n) {  // gate n-tile n, up n-tile n + kWarpTiles / 2
              const int col = item.col0 + tile_row(n, false) + 2 * t;
              if (col >= n_out) continue;
              float g0 = acc[mt][n][2 * half], g1 = acc[mt][n][2 * half + 1];
              float u0 = acc[mt][n + kWarpTiles / 2][2 * half], u1 = acc[mt][n + kWarpTiles / 2][2 * half + 1];
              if constexpr (kClamp) {
                clamp_swiglu(g0, u0, p.swiglu_limit);
                clamp_swiglu(g1, u1, p.swiglu_limit);
              }
              *reinterpret_cast<__nv_bfloat162*>(o + col) =
                  __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
            }
          }
        }
      }
      if (!down) {  // this warp's act columns are written: count them for the expert's down items
        __syncwarp();
        if (lane == 0) __threadfence(), atomicAdd(p.sync + kGateUpDone + item.expert, 1);
      }
    }
  }

  // The last block to finish leaves the sync words zeroed for the next launch: every other block is past its
  // last claim and count by then.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(p.sync + kFinishedBlocks, 1) == static_cast<int>(gridDim.x) - 1) {
      __threadfence();
      for (int i = 0; i < kGateUpDone + num_experts; ++i) p.sync[i] = 0;
    }
  }
}

// The item shape: the fastest of the warp, stage and row counts tried (results/h200/design-measurements.md).
using GroupedShape = Shape<4, 2, 4, 128>;

}  // namespace

int64_t moe_grouped_sync_ints(int64_t num_experts) { return kGateUpDone + num_experts; }

cudaError_t moe_grouped_experts(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* expert_offsets,
                                int64_t num_experts, int64_t hidden, int64_t inter, const __nv_bfloat16* gate_up,
                                const __nv_bfloat16* down, float swiglu_limit, __nv_bfloat16* act,
                                __nv_bfloat16* y, int32_t* sync, int num_sms, cudaStream_t stream) {
  using S = GroupedShape;
  if (num_experts == 0) return cudaSuccess;
  CUtensorMap gate_up_map, down_map;
  const auto E = static_cast<uint64_t>(num_experts), H = static_cast<uint64_t>(hidden),
             I = static_cast<uint64_t>(inter);
  if (make_bf16_tensor_map(&gate_up_map, gate_up, 2 * E, I, H, 2, S::kTileRows / 2, kTileK) != CUDA_SUCCESS ||
      make_bf16_tensor_map(&down_map, down, E, H, I, 1, S::kTileRows, kTileK) != CUDA_SUCCESS)
    return cudaErrorInvalidValue;
  const size_t shared = S::kSharedBytes + S::kStages * sizeof(int) + 2 * (E + 1) * sizeof(int);
  // The clamp a template flag: the unclamped models' kernel stays as it was.
  const auto kernel = swiglu_limit > 0.0f ? experts_kernel<S, true> : experts_kernel<S, false>;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  if (status != cudaSuccess) return status;
  const Problem problem{x,         token_of_row,     expert_offsets, static_cast<int>(num_experts),
                        static_cast<int>(hidden), static_cast<int>(inter), swiglu_limit, act, y, sync};
  launch_dependent(kernel, static_cast<unsigned>(S::kBlocksPerSM * num_sms), S::kThreads, shared, stream, gate_up_map,
                   down_map, problem);
  return cudaSuccess;
}

}  // namespace deepinfer::cuda
