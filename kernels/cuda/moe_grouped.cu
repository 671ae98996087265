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
// __syncthreads a stage: alone on the DeepSeek-V2-Lite decode shape (256 tokens, benchmarks/moe_grouped_bench)
// its gate/up kernel took 235 us (3.14 TB/s); without its MMAs 229, without MMAs and fragment loads 215,
// without its x copies 210, while the same weights read through the same stages by a kernel that does nothing
// else took 177: the loads' instructions, not the arithmetic, were the cost. This one takes 195-200 us.
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

// Persistent: kBlocksPerSM blocks an SM take the work items round robin, and one kStages-deep pipeline runs
// through all of a block's items, so it never drains between them. MMAs are m16n8k16 bf16; MMA warp w takes two
// 16-row slices of the item's weight rows, each one ldmatrix.x4 (two n-tiles) per k step: with kSwiGLU gate rows
// [16w, 16w + 16) and the matching up rows [64 + 16w, ...), so silu(gate) * up is formed in registers; otherwise
// rows [32w, 32w + 32). Weights arrive 128-byte swizzled (tma.cuh): row r's 16-byte piece c at c ^ (r % 8).
// k not a multiple of 64: the tensor boxes and the x copies fill zeros past k.
template <bool kSwiGLU, class S>
__global__ void __launch_bounds__(S::kThreads, S::kBlocksPerSM)
    grouped_kernel(const __grid_constant__ CUtensorMap weight_map, const __nv_bfloat16* x, const int32_t* x_row_of,
                   const int32_t* offsets, int num_experts, int k_dim, int n_out, __nv_bfloat16* out) {
  constexpr int kMmaWarps = S::kMmaWarps, kStages = S::kStages, kThreads = S::kThreads;
  constexpr int kWarpTiles = S::kWarpTiles, kTileRows = S::kTileRows;
  constexpr int kWeightBytes = S::kWeightBytes, kStageBytes = S::kStageBytes;
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  auto* full = reinterpret_cast<uint64_t*>(shared_bytes + kStages * kStageBytes);  // [kStages]: stage landed
  uint64_t* empty = full + kStages;                                                 // [kStages]: stage released
  auto* pass_prefix = reinterpret_cast<int*>(empty + kStages);                      // [num_experts + 1]
  int* shared_offsets = pass_prefix + num_experts + 1;  // [num_experts + 1]: no global load when an item starts
  for (int e = threadIdx.x; e <= num_experts; e += kThreads) shared_offsets[e] = offsets[e];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  if (threadIdx.x == 0) {  // full: the copy warp's 32 lanes (their x copies) and its lane 0's expected bytes
    for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 33), mbarrier_init(&empty[s], kMmaWarps);
    fence_barrier_init();
  }

  // Passes of up to 64 rows per expert, and their exclusive prefix (warp 0: lane l sums a run of experts).
  if (warp == 0) {
    const int per_lane = (num_experts + 31) / 32;
    auto passes = [&](int e) { return (offsets[e + 1] - offsets[e] + kMaxRows - 1) / kMaxRows; };
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

  constexpr int kCols = kSwiGLU ? kTileRows / 2 : kTileRows;  // output columns of an item
  const int n_tiles = (n_out + kCols - 1) / kCols;
  const int k_tiles = (k_dim + kTileK - 1) / kTileK;
  const int total_items = pass_prefix[num_experts] * n_tiles;
  const int my_items = static_cast<int>(blockIdx.x) < total_items
                           ? (total_items - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
                           : 0;
  const int total_steps = my_items * k_tiles;
  auto item_of = [&](int j) {
    return decode_item(static_cast<int>(blockIdx.x) + j * static_cast<int>(gridDim.x), pass_prefix, num_experts,
                       shared_offsets, n_tiles, kCols);
  };

  if (warp == kMmaWarps) {  // the copy warp
    // Lane l copies 16-byte piece l % 8 of the item's x rows l / 8 + 4i; their row numbers in x are looked up
    // once an item (x_row_of), not once a stage.
    constexpr int kLaneRows = kMaxRows / 4;
    const int piece = 8 * (lane % 8);
    int64_t x_row[kLaneRows];
    Item item{};
    for (int step = 0, j = 0, kt = 0; step < total_steps; ++step) {
      if (kt == 0) {
        item = item_of(j);
#pragma unroll
        for (int i = 0; i < kLaneRows; ++i) {
          const int r = lane / 8 + 4 * i;
          const int64_t row = item.first_row + r;
          x_row[i] = r < item.rows ? (x_row_of ? x_row_of[row] : row) : 0;
        }
      }
      const int slot = step % kStages;
      if (step >= kStages) mbarrier_wait(&empty[slot], (step / kStages - 1) & 1, "moe_grouped copy warp");
      unsigned char* stage = shared_bytes + slot * kStageBytes;
      const int k = kt * kTileK;
      if (lane == 0) {
        mbarrier_arrive_expect_tx(&full[slot], kWeightBytes);
        // The weights as a tensor [E * planes, n_out, k], planes 2 (gate, up) with SwiGLU: one box of this k
        // step's columns of rows [col0, col0 + 64) of both planes, or [col0, col0 + 128); rows past n_out fill
        // zeros, so no box reads into the next expert. (Two 2-D boxes a stage measured the same: gate/up 195-200
        // against 194 us alone, decode batch 256 12.20 / 12.37 against 12.32 / 12.23 ms.)
        tma_load_3d(stage, &weight_map, k, item.col0, item.expert * (kSwiGLU ? 2 : 1), &full[slot]);
      }
      // The x rows: 16-byte cp.async pieces (zeros past k), the lanes taking pieces round robin. One bulk copy a
      // row was slower: 24 rows a stage, 262 against 235 us for the gate/up kernel (the copy engine's cost is per
      // copy, not per byte).
      const bool valid = k + piece < k_dim;
#pragma unroll
      for (int i = 0; i < kLaneRows; ++i) {
        const int r = lane / 8 + 4 * i;
        if (r >= item.rows) break;
        const __nv_bfloat16* src = x + x_row[i] * k_dim + k + piece;
        cp_async_16(stage + kWeightBytes + (r * kXStride + piece) * 2, valid ? src : x, valid);
      }
      cp_async_mbarrier_arrive(&full[slot]);
      if (++kt == k_tiles) kt = 0, ++j;
    }
    return;
  }

  // The first weight row (within the tile) of the warp's n-tile n: with kSwiGLU its gate n-tiles, then the up
  // n-tiles of the same columns; otherwise kWarpTiles consecutive n-tiles.
  auto tile_row = [&](int n) {
    constexpr int kHalf = kWarpTiles / 2;
    if constexpr (kSwiGLU) return n < kHalf ? 8 * (kHalf * warp + n) : kCols + 8 * (kHalf * warp + n - kHalf);
    return 8 * (kWarpTiles * warp + n);
  };
  // ldmatrix lane addresses: x4 number h loads n-tiles 2h and 2h + 1 (lane l: row (l & 7) of n-tile 2h + l / 16,
  // 16-byte piece (l / 8) % 2 of the k step, swizzled); the x rows (byte offsets within a stage).
  int b_row_bytes[kWarpTiles / 2];
#pragma unroll
  for (int h = 0; h < kWarpTiles / 2; ++h) b_row_bytes[h] = (tile_row(2 * h + (lane >> 4)) + (lane & 7)) * kTileK * 2;
  const int b_piece = (lane >> 3) & 1, b_swizzle = lane & 7;
  const int a_offset = kWeightBytes + (((lane & 7) + 8 * ((lane >> 3) & 1)) * kXStride + 8 * (lane >> 4)) * 2;

  Item item{};
  int m_tiles = 0;
  float acc[kMaxRows / 16][kWarpTiles][4];  // [m-tile][n-tile][fragment]
  for (int step = 0, j = 0, kt = 0; step < total_steps; ++step) {
    if (kt == 0) {  // a new item: its rows, and fresh accumulators
      item = item_of(j);
      m_tiles = (item.rows + 15) / 16;
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt)
#pragma unroll
        for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
    }
    const int slot = step % kStages;
    mbarrier_wait(&full[slot], (step / kStages) & 1, "moe_grouped MMA warp");
    const unsigned char* stage = shared_bytes + slot * kStageBytes;
    switch (m_tiles) {
      case 1: mma_stage<1>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
      case 2: mma_stage<2>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
      case 3: mma_stage<3>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
      default: mma_stage<4>(acc, stage, b_row_bytes, b_piece, b_swizzle, a_offset); break;
    }
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&empty[slot]);  // this warp is done with the stage
    if (kt == k_tiles - 1) {  // the item's last stage: write its rows
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mt * 16 + g + 8 * half;
          if (mt >= m_tiles || r >= item.rows) continue;
          __nv_bfloat16* o = out + (item.first_row + r) * n_out;
          if constexpr (kSwiGLU) {
#pragma unroll
            for (int n = 0; n < kWarpTiles / 2; ++n) {  // gate n-tile n, up n-tile n + kWarpTiles / 2
              const int col = item.col0 + tile_row(n) + 2 * t;
              if (col >= n_out) continue;
              const float g0 = acc[mt][n][2 * half], g1 = acc[mt][n][2 * half + 1];
              const float u0 = acc[mt][n + kWarpTiles / 2][2 * half], u1 = acc[mt][n + kWarpTiles / 2][2 * half + 1];
              *reinterpret_cast<__nv_bfloat162*>(o + col) =
                  __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
            }
          } else {
#pragma unroll
            for (int n = 0; n < kWarpTiles; ++n) {
              const int col = item.col0 + tile_row(n) + 2 * t;
              if (col >= n_out) continue;
              *reinterpret_cast<__nv_bfloat162*>(o + col) =
                  __floats2bfloat162_rn(acc[mt][n][2 * half], acc[mt][n][2 * half + 1]);
            }
          }
        }
      }
    }
    if (++kt == k_tiles) kt = 0, ++j;
  }
}

template <bool kSwiGLU, class S>
cudaError_t launch(const __nv_bfloat16* x, const int32_t* x_row_of, const int32_t* offsets, int64_t num_experts,
                   int64_t k_dim, int64_t n_out, const __nv_bfloat16* weights, __nv_bfloat16* out, int num_sms,
                   cudaStream_t stream) {
  if (num_experts == 0) return cudaSuccess;
  CUtensorMap weight_map;
  constexpr int kPlanes = kSwiGLU ? 2 : 1;
  if (make_bf16_tensor_map(&weight_map, weights, static_cast<uint64_t>(num_experts * kPlanes),
                           static_cast<uint64_t>(n_out), static_cast<uint64_t>(k_dim), kPlanes, S::kTileRows / kPlanes,
                           kTileK) != CUDA_SUCCESS)
    return cudaErrorInvalidValue;
  const size_t shared = S::kSharedBytes + 2 * static_cast<size_t>(num_experts + 1) * sizeof(int);
  constexpr auto kernel = grouped_kernel<kSwiGLU, S>;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  if (status != cudaSuccess) return status;
  launch_dependent(kernel, static_cast<unsigned>(S::kBlocksPerSM * num_sms), S::kThreads, shared, stream, weight_map,
                   x, x_row_of, offsets, static_cast<int>(num_experts), static_cast<int>(k_dim),
                   static_cast<int>(n_out), out);
  return cudaSuccess;
}

// Measured alone at 256 tokens (gate/up, us): this shape 195-197; eight MMA warps 200.8; one block an SM with
// eight stages and 8 / 4 MMA warps 222.1 / 199.7; 64-row items 202.0-214.6. Launched on fewer blocks so that
// every block has the same number of items (235 at 256 tokens), a decode step was no faster.
using GroupedShape = Shape<4, 2, 4, 128>;

}  // namespace

cudaError_t moe_grouped_gate_up(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* expert_offsets,
                                int64_t num_experts, int64_t hidden, int64_t inter, const __nv_bfloat16* gate_up,
                                __nv_bfloat16* act, int num_sms, cudaStream_t stream) {
  return launch<true, GroupedShape>(x, token_of_row, expert_offsets, num_experts, hidden, inter, gate_up, act, num_sms,
                                    stream);
}

cudaError_t moe_grouped_down(const __nv_bfloat16* act, const int32_t* expert_offsets, int64_t num_experts,
                             int64_t hidden, int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* y, int num_sms,
                             cudaStream_t stream) {
  return launch<false, GroupedShape>(act, nullptr, expert_offsets, num_experts, inter, hidden, down, y, num_sms,
                                     stream);
}

}  // namespace deepinfer::cuda
