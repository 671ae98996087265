#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::cuda {

namespace {

// Four warps, two blocks an SM. Measured at batch 256 / 64, context 1024: eight warps a block (one 16-row slice
// a warp) 14.10-14.17 / 10.65-10.68 ms a step against 14.06-14.07 / 10.54-10.64; one block an SM with 6 or 8
// stages 17.9 / 12.1.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 128;        // weight rows of one work item (128 output columns, or 64 gate + 64 up)
constexpr int kTileK = 64;            // reduction depth of one pipeline stage
constexpr int kMaxRows = 64;          // expert rows of one work item (four 16-row MMA tiles)
constexpr int kStages = 4;            // stages in flight, 27 KiB each
constexpr int kBlocksPerSM = 2;
constexpr int kStride = kTileK + 8;   // padded shared row: ldmatrix rows land 4 banks apart
constexpr int kStageElems = (kTileRows + kMaxRows) * kStride;
constexpr size_t kStageBytes = static_cast<size_t>(kStages) * kStageElems * sizeof(__nv_bfloat16);
constexpr int kCopiesW = kTileRows * 8 / kThreads;  // 16-byte weight pieces a thread copies per stage
constexpr int kCopiesX = kMaxRows * 8 / kThreads;   // and x pieces
constexpr int kCopyRows = kThreads / 8;             // tile rows apart, a thread's pieces
constexpr int kWarpTiles = kTileRows / kWarps / 8;  // 8-row MMA n-tiles of weight rows a warp takes

// One work item: up to 64 rows of one expert (a "pass") against one tile of its weight rows.
struct Item {
  int64_t first_row;  // in x and out
  int rows;
  int64_t col0;  // first output column
  const __nv_bfloat16* w;  // the expert's weights
};

// Item `item` of the enumeration (expert, pass, column tile), pass_prefix[e] being the passes of experts < e.
__device__ Item decode_item(int item, const int* pass_prefix, int num_experts, const int32_t* offsets, int n_tiles,
                            int cols, const __nv_bfloat16* weights, int64_t expert_stride) {
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
  it.col0 = static_cast<int64_t>(tile) * cols;
  it.w = weights + lo * expert_stride;
  return it;
}

// Persistent: kBlocksPerSM blocks an SM take the work items round robin, and one kStages-deep cp.async pipeline
// runs through all of a block's items, so it never drains between them (one block per item had lost ~20% of
// the copy rate to pipeline fills and the last partial wave). MMAs are m16n8k16 bf16; warp w takes two 16-row
// slices of the item's weight rows, each one ldmatrix.x4 (two n-tiles) per k step: with kSwiGLU gate rows
// [16w, 16w + 16) and the matching up rows [64 + 16w, ...), so silu(gate) * up is formed in registers;
// otherwise rows [32w, 32w + 32). (64-row items, one slice a warp, balanced the blocks better but loaded the x
// fragments twice as often per weight byte: batch 256 16.39 against 14.89 ms a step, 15.19 at three blocks an
// SM.)
template <bool kSwiGLU>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM)
    grouped_kernel(const __nv_bfloat16* x, const int32_t* x_row_of, const int32_t* offsets, int num_experts,
                   int64_t k_dim, int64_t n_out, const __nv_bfloat16* weights, __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* smem = reinterpret_cast<__nv_bfloat16*>(shared_bytes);
  auto* pass_prefix = reinterpret_cast<int*>(shared_bytes + kStageBytes);  // [num_experts + 1]
  int* shared_offsets = pass_prefix + num_experts + 1;  // [num_experts + 1]: no global load when an item starts
  for (int e = threadIdx.x; e <= num_experts; e += kThreads) shared_offsets[e] = offsets[e];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;

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
  const int n_tiles = static_cast<int>((n_out + kCols - 1) / kCols);
  const int k_tiles = static_cast<int>((k_dim + kTileK - 1) / kTileK);
  const int total_items = pass_prefix[num_experts] * n_tiles;
  const int my_items = static_cast<int>(blockIdx.x) < total_items
                           ? (total_items - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
                           : 0;
  const int total_steps = my_items * k_tiles;
  const int64_t expert_stride = (kSwiGLU ? 2 : 1) * n_out * k_dim;
  auto item_of = [&](int j) {
    return decode_item(static_cast<int>(blockIdx.x) + j * static_cast<int>(gridDim.x), pass_prefix, num_experts,
                       shared_offsets, n_tiles, kCols, weights, expert_stride);
  };

  // The loader: thread copies 16-byte column `piece` of tile rows first_row + kCopyRows i, weights and x alike; the
  // source pointers are recomputed when the staged item changes (rows past the matrix or the item: zeros).
  const int piece = threadIdx.x % 8, first_row = threadIdx.x / 8;
  int staged_j = -1, staged_rows = 0;
  const __nv_bfloat16* w_src[kCopiesW];
  const __nv_bfloat16* x_src[kCopiesX];  // nullptr: a row past the item
  auto stage = [&](int j, int kt, int slot) {
    if (j != staged_j) {
      const Item it = item_of(j);
      staged_j = j;
      staged_rows = it.rows;
#pragma unroll
      for (int i = 0; i < kCopiesW; ++i) {
        const int r = first_row + kCopyRows * i;
        const int64_t col = it.col0 + (kSwiGLU ? r % kCols : r);
        w_src[i] = col < n_out ? it.w + (col + (kSwiGLU && r >= kCols ? n_out : 0)) * k_dim + 8 * piece : nullptr;
      }
#pragma unroll
      for (int i = 0; i < kCopiesX; ++i) {
        const int r = first_row + kCopyRows * i;
        const int64_t row = it.first_row + r;
        x_src[i] = r >= it.rows ? nullptr : x + (x_row_of ? x_row_of[row] : row) * k_dim + 8 * piece;
      }
    }
    __nv_bfloat16* ws = smem + slot * kStageElems + first_row * kStride + 8 * piece;
    __nv_bfloat16* as = ws + kTileRows * kStride;
    const int k = kt * kTileK;
    const bool k_valid = k + 8 * piece < k_dim;
#pragma unroll
    for (int i = 0; i < kCopiesW; ++i) {
      const bool valid = k_valid && w_src[i] != nullptr;
      cp_async_16_stream(ws + kCopyRows * i * kStride, valid ? w_src[i] + k : weights, valid);
    }
#pragma unroll
    for (int i = 0; i < kCopiesX; ++i) {
      if (first_row + kCopyRows * i >= ((staged_rows + 15) & ~15)) break;
      const bool valid = k_valid && x_src[i] != nullptr;
      cp_async_16(as + kCopyRows * i * kStride, valid ? x_src[i] + k : x, valid);
    }
  };
  int fetch_j = 0, fetch_kt = 0;
  auto fetch_next = [&](int slot) {
    stage(fetch_j, fetch_kt, slot);
    if (++fetch_kt == k_tiles) fetch_kt = 0, ++fetch_j;
  };

  // The first weight row (within the tile) of the warp's n-tile n: with kSwiGLU its gate n-tiles, then the up
  // n-tiles of the same columns; otherwise kWarpTiles consecutive n-tiles.
  auto tile_row = [&](int n) {
    constexpr int kHalf = kWarpTiles / 2;
    if constexpr (kSwiGLU) return n < kHalf ? 8 * (kHalf * warp + n) : kCols + 8 * (kHalf * warp + n - kHalf);
    return 8 * (kWarpTiles * warp + n);
  };
  // ldmatrix lane addresses (element offsets within a stage): x4 number h loads n-tiles 2h and 2h + 1; the x rows.
  int b_offset[kWarpTiles / 2];
#pragma unroll
  for (int h = 0; h < kWarpTiles / 2; ++h)
    b_offset[h] = (tile_row(2 * h + (lane >> 4)) + (lane & 7)) * kStride + 8 * ((lane >> 3) & 1);
  const int a_offset = ((lane & 7) + 8 * ((lane >> 3) & 1)) * kStride + 8 * (lane >> 4);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total_steps) fetch_next(s);
    cp_async_commit();
  }
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
    cp_async_wait<kStages - 2>();
    __syncthreads();  // this step's stage has landed, and every warp is done with the slot refilled below
    if (step + kStages - 1 < total_steps) fetch_next((step + kStages - 1) % kStages);
    cp_async_commit();
    const __nv_bfloat16* ws = smem + (step % kStages) * kStageElems;
    const __nv_bfloat16* as = ws + kTileRows * kStride;
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t b[kWarpTiles / 2][4];
#pragma unroll
      for (int h = 0; h < kWarpTiles / 2; ++h) ldmatrix_x4(b[h], ws + b_offset[h] + kk);
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt) {
        if (mt >= m_tiles) break;
        uint32_t a[4];
        ldmatrix_x4(a, as + a_offset + mt * 16 * kStride + kk);
#pragma unroll
        for (int n = 0; n < kWarpTiles; ++n)
          mma_bf16(acc[mt][n], a[0], a[1], a[2], a[3], b[n / 2][2 * (n % 2)], b[n / 2][2 * (n % 2) + 1]);
      }
    }
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
              const int64_t col = item.col0 + tile_row(n) + 2 * t;
              if (col >= n_out) continue;
              const float g0 = acc[mt][n][2 * half], g1 = acc[mt][n][2 * half + 1];
              const float u0 = acc[mt][n + kWarpTiles / 2][2 * half], u1 = acc[mt][n + kWarpTiles / 2][2 * half + 1];
              *reinterpret_cast<__nv_bfloat162*>(o + col) =
                  __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
            }
          } else {
#pragma unroll
            for (int n = 0; n < kWarpTiles; ++n) {
              const int64_t col = item.col0 + tile_row(n) + 2 * t;
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
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits
}

template <bool kSwiGLU>
void launch(const __nv_bfloat16* x, const int32_t* x_row_of, const int32_t* offsets, int64_t num_experts,
            int64_t k_dim, int64_t n_out, const __nv_bfloat16* weights, __nv_bfloat16* out, int num_sms,
            cudaStream_t stream) {
  if (num_experts == 0) return;
  const size_t shared = kStageBytes + 2 * static_cast<size_t>(num_experts + 1) * sizeof(int);
  cudaFuncSetAttribute(grouped_kernel<kSwiGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  launch_dependent(grouped_kernel<kSwiGLU>, static_cast<unsigned>(kBlocksPerSM * num_sms), kThreads, shared, stream,
                   x, x_row_of, offsets, static_cast<int>(num_experts), k_dim, n_out, weights, out);
}

}  // namespace

void moe_grouped_gate_up(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* expert_offsets,
                         int64_t num_experts, int64_t hidden, int64_t inter, const __nv_bfloat16* gate_up,
                         __nv_bfloat16* act, int num_sms, cudaStream_t stream) {
  launch<true>(x, token_of_row, expert_offsets, num_experts, hidden, inter, gate_up, act, num_sms, stream);
}

void moe_grouped_down(const __nv_bfloat16* act, const int32_t* expert_offsets, int64_t num_experts, int64_t hidden,
                      int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* y, int num_sms, cudaStream_t stream) {
  launch<false>(act, nullptr, expert_offsets, num_experts, inter, hidden, down, y, num_sms, stream);
}

}  // namespace deepinfer::cuda
