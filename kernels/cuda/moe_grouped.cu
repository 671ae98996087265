#include <cstdio>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::cuda {

namespace {

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
constexpr int kRing = 8;                            // item numbers a block holds: the loader is < 5 items ahead
constexpr uint64_t kWaitLimitNs = 2'000'000'000;     // a gate/up pass not written by then is a bug: trap

// The two projections. Gate/up items write 64 columns of act (64 gate and the matching 64 up weight rows, SwiGLU
// formed in registers); down items write 128 columns of y.
struct Problem {
  const __nv_bfloat16* x;
  const int32_t* offsets;
  int num_experts;
  int max_passes;  // the workspace's capacity
  int64_t hidden, inter;
  const __nv_bfloat16* gate_up;
  const __nv_bfloat16* down;
  __nv_bfloat16* act;
  __nv_bfloat16* y;
  int* next_item;    // the items handed out so far
  int* pass_ready;   // [max_passes]: gate/up items of each pass written
};

// One work item: up to 64 rows of one expert (a "pass") against one tile of its weight rows, in one projection.
struct Item {
  bool gate_up;
  int pass;           // over all experts: pass_prefix[e] + the pass within expert e
  int rows;
  int64_t first_row;  // in the input and the output
  int64_t col0;       // first output column
  int64_t k_dim, n_out;
  const __nv_bfloat16* w;    // the expert's weights of this projection
  const __nv_bfloat16* in;   // x or act
  __nv_bfloat16* out;        // act or y
};

struct Enumeration {
  int gate_up_tiles, down_tiles, passes;  // items: passes * gate_up_tiles gate/up ones, then the down ones
  __device__ int total() const { return passes * (gate_up_tiles + down_tiles); }
};

__device__ Item decode_item(int id, const Problem& p, const Enumeration& en, const int* pass_prefix) {
  Item it;
  it.gate_up = id < en.passes * en.gate_up_tiles;
  const int tiles = it.gate_up ? en.gate_up_tiles : en.down_tiles;
  if (!it.gate_up) id -= en.passes * en.gate_up_tiles;
  it.pass = id / tiles;
  const int tile = id % tiles;
  int lo = 0, hi = p.num_experts;  // the last expert whose passes start at or before it.pass
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (pass_prefix[mid] <= it.pass) lo = mid;
    else hi = mid;
  }
  it.first_row = p.offsets[lo] + static_cast<int64_t>(it.pass - pass_prefix[lo]) * kMaxRows;
  it.rows = static_cast<int>(min(static_cast<int64_t>(kMaxRows), p.offsets[lo + 1] - it.first_row));
  it.k_dim = it.gate_up ? p.hidden : p.inter;
  it.n_out = it.gate_up ? p.inter : p.hidden;
  it.col0 = static_cast<int64_t>(tile) * (it.gate_up ? kTileRows / 2 : kTileRows);
  it.w = it.gate_up ? p.gate_up + lo * 2 * p.inter * p.hidden : p.down + lo * p.hidden * p.inter;
  it.in = it.gate_up ? p.x : p.act;
  it.out = it.gate_up ? p.act : p.y;
  return it;
}

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread 0 waits until `pass` has all its gate/up items written; the barrier passes that on to the block.
__device__ void wait_for_pass(const Problem& p, int pass, int want) {
  if (threadIdx.x == 0 && load_acquire(p.pass_ready + pass) < want) {
    const uint64_t start = global_time_ns();
    while (load_acquire(p.pass_ready + pass) < want) {
      if (global_time_ns() - start > kWaitLimitNs) {
        printf("moe_grouped_mlp: block %d waited over 2 s for the gate/up items of pass %d (%d of %d written)\n",
               blockIdx.x, pass, load_acquire(p.pass_ready + pass), want);
        __trap();
      }
      __nanosleep(64);
    }
  }
  __syncthreads();
}

// cp.async.wait_group takes an immediate: at most `pending` of this thread's groups still in flight.
__device__ __forceinline__ void cp_async_wait_at_most(int pending) {
  if (pending >= 2) cp_async_wait<2>();
  else if (pending == 1) cp_async_wait<1>();
  else cp_async_wait<0>();
}

// Persistent: kBlocksPerSM blocks an SM take work items from one counter, and one kStages-deep cp.async pipeline
// runs through all of a block's items, so it never drains between them. Gate/up items are numbered before every
// down item, so a block that waits for a pass holds no gate/up work of its own (below) and the items it waits for
// belong to running blocks: no deadlock. Handing items out as blocks free up (rather than round robin) and
// running both projections in one launch fills the last wave: with 1,408 gate/up items on 264 blocks, round
// robin left a sixth of the blocks a whole item longer than the rest.
//
// MMAs are m16n8k16 bf16; warp w takes two 16-row slices of the item's weight rows, each one ldmatrix.x4 (two
// n-tiles) per k step: for gate/up, gate rows [16w, 16w + 16) and the matching up rows [64 + 16w, ...), so
// silu(gate) * up is formed in registers; for down, rows [32w, 32w + 32). (64-row items, one slice a warp,
// balanced the blocks better but loaded the x fragments twice as often per weight byte: batch 256 16.39 against
// 14.89 ms a step, 15.19 at three blocks an SM.)
__global__ void __launch_bounds__(kThreads, kBlocksPerSM) grouped_mlp_kernel(const Problem p) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* smem = reinterpret_cast<__nv_bfloat16*>(shared_bytes);
  auto* pass_prefix = reinterpret_cast<int*>(shared_bytes + kStageBytes);  // [num_experts + 1]
  __shared__ int ring[kRing];  // the item number of the block's j-th item at ring[j % kRing]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;

  // Passes of up to 64 rows per expert, and their exclusive prefix (warp 0: lane l sums a run of experts).
  if (warp == 0) {
    const int per_lane = (p.num_experts + 31) / 32;
    auto passes = [&](int e) { return (p.offsets[e + 1] - p.offsets[e] + kMaxRows - 1) / kMaxRows; };
    int local = 0;
    for (int i = 0; i < per_lane; ++i)
      if (lane * per_lane + i < p.num_experts) local += passes(lane * per_lane + i);
    int inclusive = local;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += v;
    }
    int run = inclusive - local;
    for (int i = 0; i < per_lane; ++i) {
      const int e = lane * per_lane + i;
      if (e < p.num_experts) pass_prefix[e] = run, run += passes(e);
    }
    if (lane == 31) pass_prefix[p.num_experts] = inclusive;
  }
  __syncthreads();
  Enumeration en;
  en.gate_up_tiles = static_cast<int>((p.inter + kTileRows / 2 - 1) / (kTileRows / 2));
  en.down_tiles = static_cast<int>((p.hidden + kTileRows - 1) / kTileRows);
  en.passes = pass_prefix[p.num_experts];
  if (en.passes > p.max_passes) {  // offsets past the pairs the workspace was sized for
    if (threadIdx.x == 0 && blockIdx.x == 0)
      printf("moe_grouped_mlp: %d passes, the workspace holds %d\n", en.passes, p.max_passes);
    __trap();
  }
  const int total_items = en.total();
  auto k_tiles_of = [](const Item& it) { return static_cast<int>((it.k_dim + kTileK - 1) / kTileK); };

  // The loader: stages one k step of its current item per call; thread copies 16-byte column `piece` of tile
  // rows first_row + 16 i, weights and inputs alike (rows past the matrix or the item: zeros). It takes a new
  // item from the counter when the last one is staged, and stages a down item's first step only once that
  // pass's gate/up items are written.
  const int piece = threadIdx.x % 8, first_row = threadIdx.x / 8;
  struct Loader {
    int j = 0;          // the block's item being staged
    int kt = 0;         // its next k step
    bool held = false;  // item j taken from the counter
    bool done = false;  // the counter ran out
    int fetched = 0;    // steps staged so far
    int last_gate_up_step = -1;
    Item it;
    int k_tiles = 0;
    const __nv_bfloat16* w_src[kCopiesW];
    const __nv_bfloat16* x_src;
  } ld;
  // Returns whether a step was staged. `may_wait`: the block holds no gate/up step it has not finished.
  auto fetch = [&](bool may_wait) {
    if (!ld.held) {
      if (threadIdx.x == 0) ring[ld.j % kRing] = atomicAdd(p.next_item, 1);
      __syncthreads();
      const int id = ring[ld.j % kRing];
      if (id >= total_items) {
        ld.done = true;
        return false;
      }
      ld.held = true;
      ld.it = decode_item(id, p, en, pass_prefix);
      ld.k_tiles = k_tiles_of(ld.it);
#pragma unroll
      for (int i = 0; i < kCopiesW; ++i) {
        const int r = first_row + 16 * i;
        const int64_t col = ld.it.col0 + (ld.it.gate_up ? r % (kTileRows / 2) : r);
        const int64_t row = col + (ld.it.gate_up && r >= kTileRows / 2 ? ld.it.n_out : 0);
        ld.w_src[i] = col < ld.it.n_out ? ld.it.w + row * ld.it.k_dim + 8 * piece : nullptr;
      }
      ld.x_src = ld.it.in + (ld.it.first_row + first_row) * ld.it.k_dim + 8 * piece;
    }
    if (ld.kt == 0 && !ld.it.gate_up) {
      if (!may_wait) return false;
      wait_for_pass(p, ld.it.pass, en.gate_up_tiles);
    }
    const int slot = ld.fetched % kStages;
    __nv_bfloat16* ws = smem + slot * kStageElems + first_row * kStride + 8 * piece;
    __nv_bfloat16* as = ws + kTileRows * kStride;
    const int64_t k = static_cast<int64_t>(ld.kt) * kTileK;
    const bool k_valid = k + 8 * piece < ld.it.k_dim;
#pragma unroll
    for (int i = 0; i < kCopiesW; ++i) {
      const bool valid = k_valid && ld.w_src[i] != nullptr;
      cp_async_16_stream(ws + 16 * i * kStride, valid ? ld.w_src[i] + k : p.gate_up, valid);
    }
#pragma unroll
    for (int i = 0; i < kCopiesX; ++i) {
      if (first_row + 16 * i >= ((ld.it.rows + 15) & ~15)) break;
      const bool valid = k_valid && first_row + 16 * i < ld.it.rows;
      cp_async_16(as + 16 * i * kStride, valid ? ld.x_src + 16 * i * ld.it.k_dim + k : p.x, valid);
    }
    cp_async_commit();
    if (ld.it.gate_up) ld.last_gate_up_step = ld.fetched;
    ++ld.fetched;
    if (++ld.kt == ld.k_tiles) ld.kt = 0, ++ld.j, ld.held = false;
    return true;
  };

  // ldmatrix lane addresses (element offsets within a stage): the x rows, and (per item) the two weight slices.
  const int a_offset = ((lane & 7) + 8 * ((lane >> 3) & 1)) * kStride + 8 * (lane >> 4);

  for (int s = 0; s < kStages - 1; ++s)
    if (ld.done || !fetch(ld.last_gate_up_step < 0)) break;
  Item item{};
  int slice[2] = {0, 0}, b_offset[2] = {0, 0}, m_tiles = 0, k_tiles = 0;
  float acc[kMaxRows / 16][4][4];  // [m-tile][n-tile: slice 0 (two), slice 1 (two)][fragment]
  for (int s = 0, j = 0, kt = 0;; ++s) {
    // Nothing staged for this step: every earlier step is finished (and published), so waiting is safe.
    if (ld.fetched == s && (ld.done || !fetch(true))) break;
    if (kt == 0) {  // a new item: its rows, its weight slices, and fresh accumulators
      item = decode_item(ring[j % kRing], p, en, pass_prefix);
      k_tiles = k_tiles_of(item);
      m_tiles = (item.rows + 15) / 16;
      slice[0] = item.gate_up ? 16 * warp : 32 * warp;
      slice[1] = item.gate_up ? kTileRows / 2 + 16 * warp : 32 * warp + 16;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        b_offset[h] = (slice[h] + (lane & 7) + 8 * (lane >> 4)) * kStride + 8 * ((lane >> 3) & 1);
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
    }
    cp_async_wait_at_most(ld.fetched - s - 1);
    __syncthreads();  // this step's stage has landed, and every warp is done with the slot refilled below
    if (!ld.done && ld.fetched < s + kStages) fetch(ld.last_gate_up_step < s);
    const __nv_bfloat16* ws = smem + (s % kStages) * kStageElems;
    const __nv_bfloat16* as = ws + kTileRows * kStride;
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t b[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) ldmatrix_x4(b[h], ws + b_offset[h] + kk);
#pragma unroll
      for (int mt = 0; mt < kMaxRows / 16; ++mt) {
        if (mt >= m_tiles) break;
        uint32_t a[4];
        ldmatrix_x4(a, as + a_offset + mt * 16 * kStride + kk);
#pragma unroll
        for (int n = 0; n < 4; ++n)
          mma_bf16(acc[mt][n], a[0], a[1], a[2], a[3], b[n / 2][2 * (n % 2)], b[n / 2][2 * (n % 2) + 1]);
      }
    }
    if (++kt < k_tiles) continue;
    // The item's last step: write its rows.
#pragma unroll
    for (int mt = 0; mt < kMaxRows / 16; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + 8 * half;
        if (mt >= m_tiles || r >= item.rows) continue;
        __nv_bfloat16* o = item.out + (item.first_row + r) * item.n_out;
        if (item.gate_up) {
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const int64_t col = item.col0 + 16 * warp + 8 * n + 2 * t;
            if (col >= item.n_out) continue;
            const float g0 = acc[mt][n][2 * half], g1 = acc[mt][n][2 * half + 1];
            const float u0 = acc[mt][n + 2][2 * half], u1 = acc[mt][n + 2][2 * half + 1];
            *reinterpret_cast<__nv_bfloat162*>(o + col) =
                __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
          }
        } else {
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const int64_t col = item.col0 + slice[n / 2] + 8 * (n % 2) + 2 * t;
            if (col >= item.n_out) continue;
            *reinterpret_cast<__nv_bfloat162*>(o + col) =
                __floats2bfloat162_rn(acc[mt][n][2 * half], acc[mt][n][2 * half + 1]);
          }
        }
      }
    }
    if (item.gate_up) {  // published: every thread's rows visible device-wide before the count goes up
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(p.pass_ready + item.pass, 1);
    }
    kt = 0, ++j;
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits
}

int max_passes(int64_t pairs, int64_t num_experts) { return static_cast<int>((pairs + kMaxRows - 1) / kMaxRows + num_experts); }

}  // namespace

size_t moe_grouped_workspace_bytes(int64_t pairs, int64_t num_experts) {
  return (1 + static_cast<size_t>(max_passes(pairs, num_experts))) * sizeof(int);
}

void moe_grouped_mlp(const __nv_bfloat16* x, const int32_t* expert_offsets, int64_t num_experts, int64_t pairs,
                     int64_t hidden, int64_t inter, const __nv_bfloat16* gate_up, const __nv_bfloat16* down,
                     __nv_bfloat16* act, __nv_bfloat16* y, int num_sms, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
  // Preconditions the caller guarantees (the model sizes the workspace with moe_grouped_workspace_bytes).
  if (num_experts == 0 || pairs == 0 || workspace_bytes < moe_grouped_workspace_bytes(pairs, num_experts)) return;
  auto* counters = static_cast<int*>(workspace);
  cudaMemsetAsync(counters, 0, moe_grouped_workspace_bytes(pairs, num_experts), stream);
  const Problem problem{x,     expert_offsets, static_cast<int>(num_experts), max_passes(pairs, num_experts),
                        hidden, inter, gate_up, down, act, y, counters, counters + 1};
  const size_t shared = kStageBytes + static_cast<size_t>(num_experts + 1) * sizeof(int);
  cudaFuncSetAttribute(grouped_mlp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  grouped_mlp_kernel<<<static_cast<unsigned>(kBlocksPerSM * num_sms), kThreads, shared, stream>>>(problem);
}

}  // namespace deepinfer::cuda
