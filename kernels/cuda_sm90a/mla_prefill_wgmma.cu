// MLA prefill attention for DeepSeek's 128 + 64 query/key widths and 128-wide values on Hopper's warpgroup MMAs
// (kernels/cuda/mla_prefill_wgmma.cuh). Built for sm_90a only (kernels/CMakeLists.txt).
#include "kernels/cuda/mla_prefill_wgmma.cuh"

#include <utility>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sm90a.cuh"
#include "kernels/cuda_sm90a/mla_prefill_tile.cuh"
#include "kernels/cuda_sm90a/wgmma.cuh"

namespace deepinfer::cuda {

namespace {

using namespace wgmma;

constexpr int kRows = 64;  // a tile's query rows (one warpgroup MMA's M)
using mla_prefill::kKeys, mla_prefill::kNope, mla_prefill::kRope, mla_prefill::kQk, mla_prefill::kV;
constexpr int kThreads = 128;        // one warpgroup
constexpr int kQBytes = kQk / 64 * kAtomBytes, kKBytes = kQBytes, kVBytes = kV / 64 * kAtomBytes;
constexpr int kStageBytes = kKBytes + kVBytes;
// Q | stage 0 (K | V) | stage 1, after up to 1,024 bytes that bring Q to a 1,024-byte boundary: 105 KB, two blocks
// an SM (one block's softmax runs while the other's MMAs do).
constexpr size_t kSharedBytes = kQBytes + 2 * kStageBytes + 1024;
static_assert(2 * kSharedBytes <= 227 * 1024, "two blocks an SM");

// One block per (tile of up to 64 rows of one sequence, head), every head's tiles taken last first (the later rows of a
// sequence see the most keys). Per 64-key tile, loaded by cp.async into two stages (the next loads while this one
// computes): S[64, 64] = Q K^T (wgmma m64n64k16, K = [k_nope | k_pe] staged side by side), the causal mask, the online
// softmax in registers (the accumulator layout is the mma.sync one, a warp 16 rows), then O[64, 128] += P V with P
// straight from the registers (wgmma m64n128k16, A from registers; V read MN-major).
__global__ void __launch_bounds__(kThreads, 2)
    prefill_wgmma_kernel(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                         int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k,
                         const int32_t* tiles, int num_tiles, int heads, float scale, __nv_bfloat16* out) {
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = aligned_shared(shared_raw);
  const uint32_t q_base = shared_address(shared);

  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int tile = num_tiles - 1 - static_cast<int>(blockIdx.y), h = blockIdx.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int row_begin = tiles[tile], row_end = tiles[tile + 1];
  const int64_t key_begin = cu_k[q_seq[row_begin]];
  const int tile_keys = q_pos[row_end - 1] + 1;  // the tile's last row sees the most keys
  const int first_pos = q_pos[row_begin];        // and its first the fewest (a tile's rows are consecutive)
  const int num_key_tiles = (tile_keys + kKeys - 1) / kKeys;
  int pos[2];  // this thread's two rows' positions (-1 past the tile: scores kept finite, never written)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_begin + 16 * warp + g + 8 * r;
    pos[r] = row < row_end ? q_pos[row] : -1;
  }

  // Thread tid stages key tid / 2 of a tile, the pieces of parity tid % 2: K's 24 (k_nope's 16, then k_pe's 8)
  // and V's 16.
  const int stage_row = tid / 2, parity = tid % 2;
  auto stage = [&](int key_tile) {
    const int key = key_tile * kKeys + stage_row;
    const bool valid = key < tile_keys;
    const int64_t src_key = valid ? key_begin + key : 0;
    const __nv_bfloat16* row = kv + (src_key * heads + h) * (kNope + kV);
    const __nv_bfloat16* pe = k_pe + src_key * k_pe_stride;
    unsigned char* k_dst = shared + kQBytes + (key_tile % 2) * kStageBytes;
#pragma unroll
    for (int u = parity; u < kQk / 8; u += 2)
      cp_async_16(k_dst + swizzled(stage_row, u), u < kNope / 8 ? row + 8 * u : pe + 8 * (u - kNope / 8), valid);
#pragma unroll
    for (int u = parity; u < kV / 8; u += 2)
      cp_async_16(k_dst + kKBytes + swizzled(stage_row, u), row + kNope + 8 * u, valid);
  };
  for (int i = tid; i < kRows * (kQk / 8); i += kThreads) {
    const int row = i / (kQk / 8), unit = i % (kQk / 8);
    const bool valid = row_begin + row < row_end;
    const __nv_bfloat16* src = q + (static_cast<int64_t>(valid ? row_begin + row : row_begin) * heads + h) * kQk;
    cp_async_16(shared + swizzled(row, unit), src + 8 * unit, valid);
  }
  stage(0);
  cp_async_commit();

  float o[kV / 2] = {};  // 64 x 128 fp32 over the warpgroup: columns 8 n + 2 t (+1), rows 16 warp + g (+8)
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // log2 units
  const float scale_log2 = scale * kLog2e;
  for (int kt = 0; kt < num_key_tiles; ++kt) {
    if (kt + 1 < num_key_tiles) stage(kt + 1);  // its stage was last read before the previous tile's barrier
    cp_async_commit();
    cp_async_wait<1>();
    fence_shared_for_mma();
    __syncthreads();
    const uint32_t k_base = q_base + kQBytes + (kt % 2) * kStageBytes, v_base = k_base + kKBytes;

    float s[kKeys / 2] = {};  // 64 x 64 fp32: keys 8 n + 2 t (+1)
    mla_prefill::scores(q_base, k_base, s);
    mla_prefill::attend(s, o, m_run, l_run, pos, first_pos, kt * kKeys, scale_log2, t, v_base);
    __syncthreads();  // this stage is free for the tile after next
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits

  mla_prefill::store_rows(o, l_run, row_begin, row_end, warp, g, t, h, heads, out);
}

}  // namespace

bool mla_prefill_wgmma_supports(int64_t nope, int64_t rope, int64_t v_dim) {
  return nope == kNope && rope == kRope && v_dim == kV && on_sm90();
}

void mla_prefill_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                       int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k,
                       const int32_t* tiles, int64_t num_tiles, int64_t heads, float scale, __nv_bfloat16* out,
                       cudaStream_t stream) {
  cudaFuncSetAttribute(prefill_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSharedBytes));
  // Heads fastest, so that every head's heaviest tiles (the last) go first, not head 127's near the end.
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>(num_tiles));
  launch_dependent(prefill_wgmma_kernel, grid, kThreads, kSharedBytes, stream, q, kv, k_pe, k_pe_stride, q_seq, q_pos,
                   cu_k, tiles, static_cast<int>(num_tiles), static_cast<int>(heads), scale, out);
}

}  // namespace deepinfer::cuda
