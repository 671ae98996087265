// One warpgroup's work on one 64-key tile in the MLA prefill kernels (mla_prefill_wgmma.cu: 64-row tiles, cp.async;
// mla_prefill_tma.cu: 128-row tiles of two warpgroups, TMA): the scores, the causal mask, the online softmax in
// registers and O += P V, written once. Q and K ([k_nope | k_pe]) are three K-major atoms each in shared memory, V two
// atoms read MN-major; the accumulators are in the mma.sync layout (a warp 16 rows: rows 16 warp + g and + 8, value i
// of row (i / 2) % 2 at column 8 (i / 4) + 2 t + i % 2).
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/cuda_sm90a/wgmma.cuh"

namespace deepinfer::cuda::mla_prefill {

using namespace wgmma;

inline constexpr int kKeys = 64;  // a key tile
inline constexpr int kNope = 128, kRope = 64, kQk = kNope + kRope, kV = 128;

// s = Q K^T for the warpgroup's 64 rows and the tile's 64 keys (wgmma m64n64k16 over q.k's 192 columns).
__device__ __forceinline__ void scores(uint32_t q_base, uint32_t k_base, float (&s)[kKeys / 2]) {
  fence_operands(s);
  cute::warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < kQk / 16; ++kk) {
    const uint32_t step = (kk / 4) * kAtomBytes + (kk % 4) * 32;
    mma_ss<gmma::MMA_64x64x16_F32BF16BF16_SS<gmma::Major::K, gmma::Major::K>>(
        k_major(q_base + step), k_major(k_base + step), s, kk == 0 ? gmma::ScaleOut::Zero : gmma::ScaleOut::One,
        std::make_index_sequence<kKeys / 2>{});
  }
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  fence_operands(s);
}

// The tile of keys [key_base, key_base + 64) after `scores`: the causal mask (pos: this thread's two rows'
// positions, -1 for a row past the tile, whose scores are kept finite and never written; first_pos: the warpgroup's
// first row's, below which no key of the tile is masked), the running maximum and sum in log2 units, and o += P V
// with P from the registers (wgmma m64n128k16).
__device__ __forceinline__ void attend(float (&s)[kKeys / 2], float (&o)[kV / 2], float (&m_run)[2],
                                       float (&l_run)[2], const int (&pos)[2], int first_pos, int key_base,
                                       float scale_log2, int t, uint32_t v_base) {
  float mx[2] = {-INFINITY, -INFINITY};
  if (key_base + kKeys - 1 <= first_pos) {  // every row sees every key of the tile: no mask (rows past the tile: Q 0)
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) {
      s[i] *= scale_log2;
      mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) {
      const int key = key_base + 8 * (i / 4) + 2 * t + (i % 2), r = (i / 2) % 2;
      s[i] = pos[r] < 0 ? 0.0f : (key <= pos[r] ? s[i] * scale_log2 : -INFINITY);
      mx[r] = fmaxf(mx[r], s[i]);
    }
  }
  float correction[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    const float new_m = fmaxf(m_run[r], mx[r]);
    // A row with no visible key yet (not possible from the first tile on: key 0 is every row's) keeps its state.
    correction[r] = new_m == -INFINITY ? 1.0f : exp2f(m_run[r] - new_m);
    m_run[r] = new_m;
  }
#pragma unroll
  for (int i = 0; i < kKeys / 2; ++i) {
    const int r = (i / 2) % 2;
    s[i] = m_run[r] == -INFINITY ? 0.0f : exp2f(s[i] - m_run[r]);
    sum[r] += s[i];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * correction[r] + quad_sum(sum[r]);
  rescale_rows(o, correction);

  // P as the A operand from registers: keys [16 kk, 16 kk + 16) are accumulator values 8 kk .. 8 kk + 7.
  uint32_t p[kKeys / 16][4];
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) p[kk][j] = pack_floats(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
  fence_operands(o);
  cute::warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
    mma_rs<gmma::MMA_64x128x16_F32BF16BF16_RS<gmma::Major::K, gmma::Major::MN>>(
        p[kk], mn_major(v_base + kk * 16 * 128), o, std::make_index_sequence<kV / 2>{});
  cute::warpgroup_commit_batch();
  cute::warpgroup_wait<0>();
  fence_operands(o);
}

// The warpgroup's output rows: o / l in bf16, rows `first_row` + 16 warp + g (+ 8) below `end_row`.
__device__ __forceinline__ void store_rows(const float (&o)[kV / 2], const float (&l_run)[2], int first_row,
                                           int end_row, int warp, int g, int t, int h, int heads,
                                           __nv_bfloat16* out) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = first_row + 16 * warp + g + 8 * r;
    if (row >= end_row) continue;
    const float weight = 1.0f / l_run[r];
    auto* dst = reinterpret_cast<uint32_t*>(out + (static_cast<int64_t>(row) * heads + h) * kV + 2 * t);
#pragma unroll
    for (int n = 0; n < kV / 8; ++n) dst[4 * n] = pack_floats(weight * o[4 * n + 2 * r], weight * o[4 * n + 2 * r + 1]);
  }
}

}  // namespace deepinfer::cuda::mla_prefill
