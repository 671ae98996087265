// MLA prefill attention in 128-row tiles with TMA-fed stages (kernels/cuda/mla_prefill_tma.cuh). Built for sm_90a only
// (kernels/CMakeLists.txt).
#include "kernels/cuda/mla_prefill_tma.cuh"

#include <utility>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sm90a.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda_sm90a/mla_prefill_tile.cuh"
#include "kernels/cuda_sm90a/wgmma.cuh"

namespace deepinfer::cuda {

namespace {

using namespace wgmma;

constexpr int kRows = 128, kWgRows = 64;  // a tile's rows, a warpgroup's (one MMA's M)
static_assert(kRows == kMlaPrefillTmaRows && kRows == 2 * kWgRows, "two warpgroups of rows a tile");
using mla_prefill::kKeys, mla_prefill::kNope, mla_prefill::kRope, mla_prefill::kQk, mla_prefill::kV;
constexpr int kQAtoms = kQk / 64;                     // a warpgroup's Q: q_nope's 2 atoms, q_pe's 1
constexpr int kStageAtoms = kQk / 64 + kV / 64;       // a stage: k_nope's 2 atoms, k_pe's 1, V's 2
constexpr int kStages = 4;
constexpr int kConsumers = 256, kThreads = kConsumers + 32;  // two warpgroups of rows, and a warp that issues copies
constexpr int kStageOffset = 2 * kQAtoms * kAtomBytes;
constexpr int kBarrierOffset = kStageOffset + kStages * kStageAtoms * kAtomBytes;
constexpr size_t kSharedBytes = kBarrierOffset + (1 + 2 * kStages) * 8 + 1024;  // 209 KB: one block an SM
static_assert(kSharedBytes <= 227 * 1024, "one block an SM");

// One block per (tile of up to 128 consecutive rows of one sequence, head), the tiles taken last first (the later rows
// see the most keys), every head's in turn. A copy warp brings Q once and then each 64-key tile of keys and values into
// one of four stages by TMA (k_nope and v from kv's rows of this head, k_pe from its own rows: five 64 x 64 atoms),
// ahead of the two warpgroups, which share the stages: warpgroup w takes rows [64 w, 64 w + 64) of the tile and, for
// each key tile its rows see, S = Q K^T (wgmma m64n64k16), the causal mask, the online softmax in registers, then O +=
// P V with P from registers (m64n128k16), as mla_prefill_wgmma.cu's warpgroup does; it releases the stage after its O
// += P V (both warpgroups release every stage, those past their rows' keys without computing). Against that kernel: the
// keys and values are read once per 128 rows instead of 64 (its L2 traffic was the bound), no thread spends
// instructions on loads, and four stages instead of two.
__global__ void __launch_bounds__(kThreads, 1)
    prefill_tma_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap kv_map,
                       const __grid_constant__ CUtensorMap pe_map, const int32_t* q_seq, const int32_t* q_pos,
                       const int32_t* cu_k, const int32_t* tiles, int num_tiles, int heads, float scale,
                       __nv_bfloat16* out) {
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = aligned_shared(shared_raw);
  const uint32_t base = shared_address(shared);
  auto* q_full = reinterpret_cast<uint64_t*>(shared + kBarrierOffset);
  uint64_t* full = q_full + 1;       // [stage]: its atoms landed
  uint64_t* empty = full + kStages;  // [stage]: both warpgroups done with it

  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int tile = num_tiles - 1 - static_cast<int>(blockIdx.y), h = blockIdx.x, tid = threadIdx.x;
  const int row_begin = tiles[tile], row_end = tiles[tile + 1];
  const int key_begin = cu_k[q_seq[row_begin]];
  const int block_key_tiles = (q_pos[row_end - 1] + 1 + kKeys - 1) / kKeys;  // what the tile's last row sees

  if (tid == kConsumers) {
    mbarrier_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], kConsumers);
    }
    fence_barrier_init();
  }
  __syncthreads();  // the barriers initialised (the only block-wide barrier: the copy warp leaves below)

  if (tid >= kConsumers) {
    if (tid != kConsumers) return;
    // Q: each warpgroup's 64 rows, q_nope and q_pe (rows past the tensor come as zeros; past the tile, never stored).
    mbarrier_arrive_expect_tx(q_full, 2 * kQAtoms * kAtomBytes);
    for (int w = 0; w < 2; ++w)
      for (int a = 0; a < kQAtoms; ++a)
        tma_load_3d(shared + (w * kQAtoms + a) * kAtomBytes, &q_map, 64 * a, h, row_begin + kWgRows * w, q_full);
    for (int t = 0; t < block_key_tiles; ++t) {
      const int s = t % kStages, use = t / kStages;
      if (use > 0) mbarrier_wait_silent(&empty[s], (use - 1) & 1);
      unsigned char* stage = shared + kStageOffset + s * kStageAtoms * kAtomBytes;
      const int key = key_begin + t * kKeys;  // keys past the sequence: the mask weighs them 0 (past the tensor: 0s)
      mbarrier_arrive_expect_tx(&full[s], kStageAtoms * kAtomBytes);
      tma_load_3d(stage, &kv_map, 0, h, key, &full[s]);                   // k_nope
      tma_load_3d(stage + kAtomBytes, &kv_map, 64, h, key, &full[s]);
      tma_load_3d(stage + 2 * kAtomBytes, &pe_map, 0, key, 0, &full[s]);  // k_pe
      tma_load_3d(stage + 3 * kAtomBytes, &kv_map, kNope, h, key, &full[s]);  // v
      tma_load_3d(stage + 4 * kAtomBytes, &kv_map, kNope + 64, h, key, &full[s]);
    }
    return;
  }

  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int wg_begin = row_begin + kWgRows * wg, wg_end = min(row_end, wg_begin + kWgRows);
  // This warpgroup's key tiles: those its last row sees (none for an empty half of a short tile).
  const int wg_key_tiles = wg_end > wg_begin ? (q_pos[wg_end - 1] + 1 + kKeys - 1) / kKeys : 0;
  const int first_pos = wg_end > wg_begin ? q_pos[wg_begin] : 0;  // the fewest keys a row of it sees, less one
  int pos[2];  // this thread's two rows' positions (-1 past its rows: scores kept finite, never written)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = wg_begin + 16 * warp + g + 8 * r;
    pos[r] = row < wg_end ? q_pos[row] : -1;
  }
  const uint32_t q_base = base + wg * kQAtoms * kAtomBytes;
  mbarrier_wait_silent(q_full, 0);

  float o[kV / 2] = {};  // 64 x 128 fp32 over the warpgroup: columns 8 n + 2 t (+1), rows 16 warp + g (+8)
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // log2 units
  const float scale_log2 = scale * kLog2e;
  for (int kt = 0; kt < block_key_tiles; ++kt) {
    const int s = kt % kStages;
    mbarrier_wait_silent(&full[s], (kt / kStages) & 1);
    if (kt < wg_key_tiles) {
      const uint32_t k_base = base + kStageOffset + s * kStageAtoms * kAtomBytes, v_base = k_base + 3 * kAtomBytes;
      float sc[kKeys / 2] = {};  // 64 x 64 fp32: keys 8 n + 2 t (+1)
      mla_prefill::scores(q_base, k_base, sc);
      mla_prefill::attend(sc, o, m_run, l_run, pos, first_pos, kt * kKeys, scale_log2, t, v_base);
    }
    mbarrier_arrive(&empty[s]);  // this thread is done with the stage
  }

  mla_prefill::store_rows(o, l_run, wg_begin, wg_end, warp, g, t, h, heads, out);
}

}  // namespace

bool mla_prefill_tma_supports(int64_t nope, int64_t rope, int64_t v_dim) {
  return nope == kNope && rope == kRope && v_dim == kV && on_sm90();
}

bool mla_prefill_tma(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe, int64_t k_pe_stride,
                     const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, const int32_t* tiles,
                     int64_t num_tiles, int64_t heads, int64_t q_rows, int64_t k_rows, float scale,
                     __nv_bfloat16* out, cudaStream_t stream) {
  CUtensorMap q_map, kv_map, pe_map;
  // q [q_rows][heads][192], kv [k_rows][heads][256], k_pe rows k_pe_stride apart: boxes of 64 columns x one head x
  // 64 rows (tokens), each one 128-byte-swizzled atom.
  if (make_bf16_tensor_map(&q_map, q, q_rows, heads, kQk, kWgRows, 1, 64) != CUDA_SUCCESS ||
      make_bf16_tensor_map(&kv_map, kv, k_rows, heads, kNope + kV, kKeys, 1, 64) != CUDA_SUCCESS ||
      make_bf16_tensor_map(&pe_map, k_pe, 1, k_rows, k_pe_stride, 1, kKeys, 64) != CUDA_SUCCESS)
    return false;
  cudaFuncSetAttribute(prefill_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSharedBytes));
  // Heads fastest, so that every head's heaviest tiles (the last) go in the first wave, not head 127's in the last.
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>(num_tiles));
  launch_dependent(prefill_tma_kernel, grid, kThreads, kSharedBytes, stream, q_map, kv_map, pe_map, q_seq, q_pos,
                   cu_k, tiles, static_cast<int>(num_tiles), static_cast<int>(heads), scale, out);
  return true;
}

}  // namespace deepinfer::cuda
