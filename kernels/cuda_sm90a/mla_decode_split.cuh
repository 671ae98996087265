// What the two warpgroup-MMA decode kernels (mla_decode_wgmma.cu, mla_decode_seesaw.cu) write for a 64-head block's
// split, written once: with one split the output itself, else the partials mla_decode.cu's combine reads.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda_sm90a/wgmma.cuh"

namespace deepinfer::cuda::mla_decode {

inline constexpr int kHeads = 64;  // a block's heads: one warpgroup MMA's M
inline constexpr int kLatent = 512, kHalfLatent = kLatent / 2;

// Warpgroup wg holds latent columns [256 wg, 256 wg + 256) of its thread's two rows (heads head0 + rows[r]) in o
// (value 4 n + 2 r (+1) at column 256 wg + 8 n + 2 t (+1)), the running maximum m_run in log2 units (the same in both
// warpgroups), and row_sum [2][64] the two warpgroups' sums, met in shared memory. out non-null: one split, o / l in
// bf16; else partial [sequence][head][split] = [latent accumulators | maximum in natural units | sum].
__device__ __forceinline__ void store_split(const float (&o)[kHalfLatent / 2], const float (&m_run)[2],
                                            const float* row_sum, const int (&rows)[2], int wg, int t, int head0,
                                            int heads, int b, int split, int num_splits, float* partial,
                                            __nv_bfloat16* out) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = head0 + rows[r];
    if (h >= heads) continue;
    const float l = row_sum[rows[r]] + row_sum[kHeads + rows[r]];
    const int64_t pair = static_cast<int64_t>(b) * heads + h;
    if (out != nullptr) {  // one split: the output itself, as the combine would write it (o / l)
      __nv_bfloat16* o_row = out + pair * kLatent + wg * kHalfLatent;
      const float weight = 1.0f / l;
#pragma unroll
      for (int n = 0; n < kHalfLatent / 8; ++n)
        *reinterpret_cast<__nv_bfloat162*>(o_row + 8 * n + 2 * t) =
            __floats2bfloat162_rn(weight * o[4 * n + 2 * r], weight * o[4 * n + 2 * r + 1]);
      continue;
    }
    float* part = partial + (pair * num_splits + split) * (kLatent + 2);
#pragma unroll
    for (int n = 0; n < kHalfLatent / 8; ++n)
      *reinterpret_cast<float2*>(part + wg * kHalfLatent + 8 * n + 2 * t) =
          make_float2(o[4 * n + 2 * r], o[4 * n + 2 * r + 1]);
    if (wg == 0 && t == 0) {
      part[kLatent] = m_run[r] / wgmma::kLog2e;
      part[kLatent + 1] = l;
    }
  }
}

}  // namespace deepinfer::cuda::mla_decode
