#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_fp4_gemm.cuh"
#include "kernels/fp_formats.h"

namespace deepinfer::cuda {

namespace {

// A block: 64 x rows by 128 weight rows (output columns), 4 warps of 32 x 64, k in stages of kBK (one or two scale
// blocks; one measured faster, benchmarks/moe_fp4_gemm_bench). Stages land in a ring of kRing buffers by cp.async (x rows, and the weight codes raw); each iteration
// decodes the next stage's codes into one of two bf16 weight buffers while the MMAs read the other, so one barrier
// an iteration orders everything (see the loop).
constexpr int kBM = 64, kBN = 128, kThreads = 128, kRing = 4;

template <int kBK>
struct Shared {
  static constexpr int kStride = kBK + 8;     // bf16 a row (16 bytes of padding: rows start 4 banks apart)
  static constexpr int kBlocks = kBK / 32;    // scale blocks (and 16-byte code pieces) a weight row a stage
  __nv_bfloat16 x[kRing][kBM][kStride];
  uint8_t codes[kRing][kBN][kBK / 2];
  __nv_bfloat16 w[2][kBN][kStride];
  uint32_t pairs[256];  // a code byte (two e2m1 values) -> their bf16 pair
};

template <int kBK>
__global__ void __launch_bounds__(kThreads) fp4_gemm_kernel(const __nv_bfloat16* x, Fp4Rows w,
                                                            const Fp4GemmTile* tiles, int n, int k,
                                                            __nv_bfloat16* y) {
  using S = Shared<kBK>;
  constexpr int kBlocks = S::kBlocks, kXPieces = kBM * kBK / 8 / kThreads;  // 16-byte x pieces a thread a stage
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  S& s = *reinterpret_cast<S*>(shared_bytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  for (int b = tid; b < 256; b += kThreads) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(e2m1_value(b & 15u), e2m1_value(b >> 4));
    s.pairs[b] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  __syncthreads();  // the table is read by every thread's decode
  begin_dependent_kernel();
  const Fp4GemmTile tile = tiles[blockIdx.y];
  const int n0 = blockIdx.x * kBN, stages = k / kBK;
  const int64_t w_row0 = static_cast<int64_t>(tile.expert) * n + n0;  // this block's first weight row
  // Thread `tid` copies weight row tid's codes and decodes that row (so a decode reads only its own copies).
  const bool w_valid = n0 + tid < n;
  const uint8_t* w_codes = w.codes + (w_row0 + (w_valid ? tid : 0)) * (k / 2);
  const uint8_t* w_scales = w.scales + (w_row0 + (w_valid ? tid : 0)) * (k / 32);
  auto issue = [&](int stage) {
    const int buffer = stage % kRing;
#pragma unroll
    for (int i = 0; i < kXPieces; ++i) {
      const int piece = tid + kThreads * i, row = piece / (kBK / 8), part = piece % (kBK / 8);
      const bool valid = row < tile.rows;
      const __nv_bfloat16* src =
          x + static_cast<int64_t>(tile.first_row + (valid ? row : 0)) * k + stage * kBK + 8 * part;
      cp_async_16(&s.x[buffer][row][8 * part], src, valid);
    }
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
      cp_async_16(&s.codes[buffer][tid][16 * b], w_codes + stage * (kBK / 2) + 16 * b, w_valid);
  };
  // The scale bytes of row tid for a stage, one a byte of the word (1 where the row is past n: its codes are 0).
  auto scales_of = [&](int stage) -> uint32_t {
    uint32_t bytes = 0;
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
      bytes |= (w_valid && stage < stages ? static_cast<uint32_t>(w_scales[stage * kBlocks + b]) : 127u) << (8 * b);
    return bytes;
  };
  // Row tid of stage `stage` (its codes landed, the scale bytes in hand) into bf16 buffer stage % 2.
  auto decode = [&](int stage, uint32_t scale_bytes) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
      const uint4 raw = *reinterpret_cast<const uint4*>(&s.codes[stage % kRing][tid][16 * b]);
      const float scale_value = __uint_as_float(((scale_bytes >> (8 * b)) & 0xffu) << 23);  // 2^(byte - 127)
      const __nv_bfloat162 scale = __floats2bfloat162_rn(scale_value, scale_value);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      uint32_t out[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        uint32_t pair = s.pairs[(words[i / 4] >> (8 * (i % 4))) & 0xffu];
        const __nv_bfloat162 scaled = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair), scale);  // exact
        out[i] = *reinterpret_cast<const uint32_t*>(&scaled);
      }
      auto* dst = reinterpret_cast<uint4*>(&s.w[stage % 2][tid][32 * b]);
#pragma unroll
      for (int q = 0; q < 4; ++q) dst[q] = make_uint4(out[4 * q], out[4 * q + 1], out[4 * q + 2], out[4 * q + 3]);
    }
  };

  // Prologue: stages 0..kRing-2 in flight, stage 0 decoded.
#pragma unroll
  for (int stage = 0; stage < kRing - 1; ++stage) {
    if (stage < stages) issue(stage);
    cp_async_commit();
  }
  uint32_t next_scales = scales_of(1);
  cp_async_wait<kRing - 2>();  // this thread's copies of stage 0
  decode(0, scales_of(0));

  const int wm = warp / 2, wn = warp % 2;
  const int row16 = (lane & 7) + 8 * ((lane >> 3) & 1), half = 8 * (lane >> 4);
  float acc[2][8][4] = {};
  for (int stage = 0; stage < stages; ++stage) {
    // Stage + 1 has landed (this thread's copies); after the barrier every thread's have, every warp is done
    // with stage - 1 (its x buffer and its bf16 weights, which the decode below and the copies overwrite), and
    // the decode of stage (the previous iteration's) is visible.
    cp_async_wait<kRing - 3>();
    __syncthreads();
    if (stage + kRing - 1 < stages) issue(stage + kRing - 1);
    cp_async_commit();
    if (stage + 1 < stages) {
      decode(stage + 1, next_scales);
      next_scales = scales_of(stage + 2);
    }
    const int buffer = stage % kRing;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldmatrix_x4(a[i], &s.x[buffer][32 * wm + 16 * i + row16][kk + half]);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        uint32_t b[4];
        ldmatrix_x4(b, &s.w[stage % 2][64 * wn + 16 * p + (lane & 7) + 8 * (lane >> 4)][kk + 8 * ((lane >> 3) & 1)]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16(acc[i][2 * p], a[i][0], a[i][1], a[i][2], a[i][3], b[0], b[1]);
          mma_bf16(acc[i][2 * p + 1], a[i][0], a[i][1], a[i][2], a[i][3], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 32 * wm + 16 * i + g + 8 * h;
      if (row >= tile.rows) continue;
      __nv_bfloat16* out = y + static_cast<int64_t>(tile.first_row + row) * n;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = n0 + 64 * wn + 8 * j + 2 * t;
        if (col < n)
          *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    }
}

template <int kBK>
void launch(const __nv_bfloat16* x, Fp4Rows w, const Fp4GemmTile* tiles, int64_t num_tiles, int64_t n, int64_t k,
            __nv_bfloat16* y, cudaStream_t stream) {
  constexpr size_t kShared = sizeof(Shared<kBK>);
  constexpr auto kernel = fp4_gemm_kernel<kBK>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared));
  const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>(num_tiles));
  launch_dependent(kernel, grid, kThreads, kShared, stream, x, w, tiles, static_cast<int>(n), static_cast<int>(k), y);
}

}  // namespace

std::vector<Fp4GemmTile> fp4_gemm_tiles(const std::vector<int32_t>& offsets) {
  std::vector<Fp4GemmTile> tiles;
  for (size_t e = 0; e + 1 < offsets.size(); ++e)
    for (int32_t row = offsets[e]; row < offsets[e + 1]; row += kFp4GemmTileRows)
      tiles.push_back({static_cast<int32_t>(e), row,
                       static_cast<int32_t>(std::min<int64_t>(kFp4GemmTileRows, offsets[e + 1] - row))});
  return tiles;
}

void moe_fp4_gemm(const __nv_bfloat16* x, Fp4Rows w, const Fp4GemmTile* tiles, int64_t num_tiles, int64_t n,
                  int64_t k, __nv_bfloat16* y, cudaStream_t stream, int stage_k) {
  if (num_tiles == 0 || k % 32 != 0 || n % 2 != 0) return;  // the caller checks the shapes
  if (stage_k == 64 && k % 64 == 0) launch<64>(x, w, tiles, num_tiles, n, k, y, stream);
  else launch<32>(x, w, tiles, num_tiles, n, k, y, stream);
}

}  // namespace deepinfer::cuda
