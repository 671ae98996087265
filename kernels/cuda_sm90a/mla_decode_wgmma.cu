// MLA decode attention for 64 heads a block on Hopper's warpgroup MMAs (kernels/cuda/mla_decode_wgmma.cuh). Built
// for sm_90a only (kernels/CMakeLists.txt): wgmma exists on no other target.
#include "kernels/cuda/mla_decode_wgmma.cuh"

#include <utility>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/sm90a.cuh"
#include "kernels/cuda_sm90a/mla_decode_split.cuh"
#include "kernels/cuda_sm90a/wgmma.cuh"

namespace deepinfer::cuda {

namespace {

using namespace wgmma;

constexpr int kKeys = 64;                        // a tile: one 64-entry cache page's worth of keys
using mla_decode::kHeads, mla_decode::kLatent, mla_decode::kHalfLatent;  // 64 heads a block, latent 512
constexpr int kRope = 64, kDim = kLatent + kRope;
constexpr int kUnits = kDim / 8;                 // 16-byte pieces of an entry
constexpr int kOperandBytes = kDim / 64 * kAtomBytes;  // Q, or one tile of cache entries: 9 atoms
constexpr int kThreads = 256;                    // two warpgroups
constexpr int kHalfKeys = kKeys / 2;             // each warpgroup scores half a tile's keys
// Shared memory: Q | tile 0 | tile 1 | P (64 heads x 64 keys, one atom) | row maxima and sums [2 warpgroups][64],
// after up to 1,024 bytes that bring the first to a 1,024-byte boundary (the swizzle repeats every 1,024 bytes).
constexpr int kPOffset = 3 * kOperandBytes;
constexpr int kStatsOffset = kPOffset + kAtomBytes;
constexpr size_t kSharedBytes = kStatsOffset + 2 * 2 * kHeads * sizeof(float) + 1024;
static_assert(kSharedBytes <= 227 * 1024, "one block an SM");

// One block per (64-head group, KV split, sequence); warpgroup w of the block scores keys [32 w, 32 w + 32) of each
// 64-key tile for all 64 heads (S = Q K^T, wgmma m64n32k16 over the 576 columns), the two halves' row maxima meet in
// shared memory, each writes its half of P (bf16) to shared memory, then warpgroup w accumulates latent columns
// [256 w, 256 w + 256) of O += P V over the whole tile (wgmma m64n256k16, V the tile's first 512 columns read
// MN-major). Tiles load by cp.async into two buffers: the next tile loads while this one computes. Each warpgroup
// keeps its own softmax sum (both rescale by the same maxima); they add at the end. Partials as mla_decode.cu's.
__global__ void __launch_bounds__(kThreads, 1)
    decode_wgmma_kernel(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                        int max_blocks_per_seq, const int32_t* seq_lens, int heads, float scale, int num_splits,
                        int keys_per_split, float* partial, __nv_bfloat16* out) {
  extern __shared__ unsigned char shared_raw[];
  unsigned char* shared = aligned_shared(shared_raw);
  const uint32_t q_base = shared_address(shared);
  float* row_max = reinterpret_cast<float*>(shared + kStatsOffset);  // [2][kHeads]
  float* row_sum = row_max + 2 * kHeads;                              // [2][kHeads]

  const int head0 = blockIdx.x * kHeads, split = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int rows[2] = {16 * warp + g, 16 * warp + g + 8};  // this thread's heads in the block (accumulator rows)

  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int len = seq_lens[b];
  const int per_split = keys_per_split > 0 ? keys_per_split : (len + num_splits - 1) / num_splits;
  const int begin = split * per_split, end = min(len, begin + per_split);
  const int num_tiles = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  const int32_t* table = block_table + static_cast<int64_t>(b) * max_blocks_per_seq;

  // Thread tid stages entry tid / 4 of a tile, pieces tid % 4, tid % 4 + 4, ...: one block-table lookup a tile.
  const int stage_row = tid / 4, stage_first = tid % 4;
  auto stage = [&](int tile) {
    const int j = begin + tile * kKeys + stage_row;
    const bool valid = j < end;
    const int64_t block = valid ? table[j / kMlaBlockSize] : 0;
    const __nv_bfloat16* src = cache + (block * kMlaBlockSize + (valid ? j % kMlaBlockSize : 0)) * kDim;
    unsigned char* dst = shared + (1 + tile % 2) * kOperandBytes;
#pragma unroll
    for (int u = stage_first; u < kUnits; u += 4) cp_async_16(dst + swizzled(stage_row, u), src + 8 * u, valid);
  };
  // Q (rows past the heads zero) in the first group, with the first tile.
  for (int i = tid; i < kHeads * kUnits; i += kThreads) {
    const int row = i / kUnits, unit = i % kUnits;
    const bool valid = head0 + row < heads;
    const __nv_bfloat16* src = q + (static_cast<int64_t>(b) * heads + (valid ? head0 + row : 0)) * kDim + 8 * unit;
    cp_async_16(shared + swizzled(row, unit), src, valid);
  }
  if (num_tiles > 0) stage(0);
  cp_async_commit();

  float o[kHalfLatent / 2] = {};  // 64 x 256 fp32 over the warpgroup: columns 256 wg + 8 n + 2 t (+1), rows above
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // log2 units; l over this warpgroup's keys
  const float scale_log2 = scale * kLog2e;
  const uint32_t p_base = q_base + kPOffset;
  unsigned char* p_tile = shared + kPOffset;
  for (int tile = 0; tile < num_tiles; ++tile) {
    if (tile + 1 < num_tiles) stage(tile + 1);  // its buffer was last read before the previous tile's end barrier
    cp_async_commit();
    cp_async_wait<1>();
    fence_shared_for_mma();
    __syncthreads();  // this tile (and Q) in shared memory, visible to the MMAs
    const uint32_t kv_base = q_base + (1 + tile % 2) * kOperandBytes;
    const int tile_len = min(kKeys, end - begin - tile * kKeys);

    float s[kHalfKeys / 2] = {};  // 64 x 32 fp32: keys 32 wg + 8 n + 2 t (+1)
    fence_operands(s);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) {
      const uint32_t step = (kk / 4) * kAtomBytes + (kk % 4) * 32;
      mma_ss<gmma::MMA_64x32x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
          k_major(q_base + step), k_major(kv_base + wg * kHalfKeys * 128 + step), s,
          kk == 0 ? gmma::ScaleOut::Zero : gmma::ScaleOut::One, std::make_index_sequence<kHalfKeys / 2>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
    fence_operands(s);

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kHalfKeys / 2; ++i) {
      const int key = wg * kHalfKeys + 8 * (i / 4) + 2 * t + (i % 2);
      s[i] = key < tile_len ? s[i] * scale_log2 : -INFINITY;
      mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      if (t == 0) row_max[wg * kHeads + rows[r]] = mx[r];
    }
    __syncthreads();
    float correction[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_m = fmaxf(m_run[r], fmaxf(row_max[rows[r]], row_max[kHeads + rows[r]]));  // finite: a key
      correction[r] = exp2f(m_run[r] - new_m);
      m_run[r] = new_m;
    }
#pragma unroll
    for (int i = 0; i < kHalfKeys / 2; i += 2) {
      const int r = (i / 2) % 2, key = wg * kHalfKeys + 8 * (i / 4) + 2 * t;
      const float p0 = exp2f(s[i] - m_run[r]), p1 = exp2f(s[i + 1] - m_run[r]);
      sum[r] += p0 + p1;
      const int row = rows[r];
      *reinterpret_cast<uint32_t*>(p_tile + row * 128 + (((key / 8) ^ (row % 8)) << 4) + (key % 8) * 2) =
          pack_floats(p0, p1);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * correction[r] + quad_sum(sum[r]);
    rescale_rows(o, correction);
    fence_shared_for_mma();
    __syncthreads();  // all of P written

    fence_operands(o);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      mma_ss<gmma::MMA_64x256x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::MN>>(
          k_major(p_base + kk * 32), mn_major(kv_base + wg * (kHalfLatent / 64) * kAtomBytes + kk * 16 * 128), o,
          gmma::ScaleOut::One, std::make_index_sequence<kHalfLatent / 2>{});
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
    fence_operands(o);
    __syncthreads();  // the tile's buffer, P and the row maxima are free
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits

  // The two warpgroups' sums (over their halves of every tile) meet; both rescaled by the same maxima.
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (t == 0) row_sum[wg * kHeads + rows[r]] = l_run[r];
  __syncthreads();
  mla_decode::store_split(o, m_run, row_sum, rows, wg, t, head0, heads, b, split, num_splits, partial, out);
}

}  // namespace

bool mla_decode_wgmma_supports(int64_t heads, int64_t latent, int64_t rope) {
  return heads > 0 && heads % kHeads == 0 && latent == kLatent && rope == kRope && on_sm90();
}

void mla_decode_wgmma(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                      int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads, float scale,
                      int64_t num_splits, int64_t keys_per_split, float* partial, __nv_bfloat16* out,
                      cudaStream_t stream) {
  cudaFuncSetAttribute(decode_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSharedBytes));
  const dim3 grid(static_cast<unsigned>(heads / kHeads), static_cast<unsigned>(num_splits),
                  static_cast<unsigned>(batch));
  launch_dependent(decode_wgmma_kernel, grid, kThreads, kSharedBytes, stream, q, cache, block_table,
                   static_cast<int>(max_blocks_per_seq), seq_lens, static_cast<int>(heads), scale,
                   static_cast<int>(num_splits), static_cast<int>(keys_per_split), partial,
                   num_splits == 1 ? out : nullptr);
}

}  // namespace deepinfer::cuda
