#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/mma.cuh"

namespace deepinfer::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kTileK = 64;          // reduction depth of one stage: 128 bytes of a row
constexpr int kStride = kTileK + 8;  // shared rows padded to 144 bytes: ldmatrix rows land 4 banks apart
constexpr int kStages = 4;
constexpr int kMaxSplits = 8;        // the portable cluster size
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kCols = 16 * kWarps;     // output columns (weight rows) of a block: 16 a warp, two MMA n-tiles
constexpr int kSumStride = kCols + 8;  // fp32 partial-sum rows: a quad's float2 stores 8 banks apart
// FP8 weight rows in shared memory: 64 codes padded to 80 bytes, so the 8 rows a fragment load reads land 20
// banks apart.
constexpr int kStride8 = kTileK + 16;
constexpr int kMaxScaleBlocks = 512;  // the k blocks of 32 one block's FP8 scales cover (k <= 16384)

// A stage: the block's weight rows (bf16, or FP8 codes), then the x rows (bf16).
template <int kMTiles, bool kFp8>
struct Layout {
  static constexpr int kRows = 16 * kMTiles;
  static constexpr int kWeightBytes = kFp8 ? kCols * kStride8 : kCols * kStride * 2;
  static constexpr int kStageBytes = kWeightBytes + kRows * kStride * 2;
  static constexpr size_t kSharedBytes = kStages * kStageBytes;
  static_assert(kRows * kSumStride * sizeof(float) <= kSharedBytes, "the partial sums reuse the stages");
  static_assert(kWeightBytes % 16 == 0, "x rows stay 16-byte aligned");
};

// A weight fragment register from two FP8 codes (the first in the low byte) times their block's scale.
__device__ __forceinline__ uint32_t fp8_pair_fragment(const uint8_t* codes, float scale) {
  const float2 v = e4m3x2_to_float2(*reinterpret_cast<const uint16_t*>(codes));
  return pack_floats(v.x * scale, v.y * scale);
}

// Block (tile, split, product) of a cluster of gridDim.y blocks: output columns [64 tile, 64 tile + 64) of
// product blockIdx.z over its share of the k tiles, in a kStages-deep cp.async pipeline (zeros past n, m and k).
// Warp w takes columns [16w, 16w + 16) for all rows: per 16-deep step one ldmatrix.x4 of weights and one of x per
// 16-row tile. The fp32 partial sums then go to the block's shared memory; after a cluster barrier block s adds
// up, for every s-th group of 4 outputs, the cluster's partials in rank order (a fixed order: results do not
// depend on timing).
//
// FP8 weights (kFp8: w holds codes, `scales` their scales, ue8m0 bytes a 32 x 32 block or fp32 a tile of a multiple
// of 32): the codes are staged as bytes and each lane converts the pairs its fragments hold, times their 32 x 32
// block's scale (a warp's 16 columns lie in one block row), instead of the ldmatrix; the block's scales are read
// into shared memory as floats first (resident).
template <int kMTiles, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) skinny_kernel(const __nv_bfloat16* x, const void* w_any,
                                                              Fp8BlockScales scales, void* y, bool y_fp32, int m,
                                                              int n, int k, GemvLayout layout, bool early_weights) {
  using L = Layout<kMTiles, kFp8>;
  constexpr int kRows = L::kRows;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ float block_scales[kFp8 ? 2 * kMaxScaleBlocks : 1];  // [2 block rows][the split's k blocks of 32]
  const cg::cluster_group cluster = cg::this_cluster();
  const int splits = gridDim.y, split = blockIdx.y;
  const int col0 = blockIdx.x * kCols;
  const int k_tiles = (k + kTileK - 1) / kTileK;
  const int first_tile = split * k_tiles / splits, num_tiles = (split + 1) * k_tiles / splits - first_tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  x += blockIdx.z * layout.x_batch;
  const auto* w = static_cast<const __nv_bfloat16*>(w_any) + (kFp8 ? 0 : blockIdx.z * layout.w_batch);
  const auto* w8 = static_cast<const uint8_t*>(w_any);
  auto stage = [&](int i) { return shared_bytes + (i % kStages) * L::kStageBytes; };
  auto stage_x_rows = [&](int i) { return reinterpret_cast<__nv_bfloat16*>(stage(i) + L::kWeightBytes); };

  // Stage i's rows [first, first + count) of `src` (rows `stride` elements apart, `valid_rows` of them, `per_piece`
  // elements of `elem_bytes` a 16-byte copy) into `buffer`'s rows `buffer_stride` bytes apart (zeros past the valid
  // rows and past k).
  auto copy_rows = [&](int i, const unsigned char* src, int elem_bytes, int64_t stride, int first, int valid_rows,
                       unsigned char* buffer, int buffer_stride, int count) {
    const int per_piece = 16 / elem_bytes, pieces = kTileK / per_piece;
    const int k0 = (first_tile + i) * kTileK;
    for (int p = threadIdx.x; p < count * pieces; p += kThreads) {
      const int row = p / pieces, piece = p % pieces, kk = k0 + per_piece * piece;
      const bool valid = kk < k && first + row < valid_rows;
      cp_async_16(buffer + row * buffer_stride + 16 * piece,
                  src + (valid ? ((first + row) * stride + kk) * elem_bytes : 0), valid);
    }
  };
  auto stage_weights = [&](int i) {
    if constexpr (kFp8) copy_rows(i, w8, 1, k, col0, n, stage(i), kStride8, kCols);
    else copy_rows(i, reinterpret_cast<const unsigned char*>(w), 2, layout.w_row, col0, n, stage(i), 2 * kStride, kCols);
  };
  auto stage_x = [&](int i) {
    copy_rows(i, reinterpret_cast<const unsigned char*>(x), 2, layout.x_row, 0, m,
              reinterpret_cast<unsigned char*>(stage_x_rows(i)), 2 * kStride, kRows);
  };
  if constexpr (kFp8) {  // the scales of the block's two 32-row blocks over its k tiles
    const int kb0 = first_tile * (kTileK / 32), kbs = num_tiles * (kTileK / 32), k_blocks = k / 32;
    const int per_row = static_cast<int>(scales.per_row(k)), tile = scales.f32 ? scales.block / 32 : 1;
    for (int p = threadIdx.x; p < 2 * kbs; p += kThreads) {
      const int row_block = col0 / 32 + p / kbs, kb = kb0 + p % kbs;
      float value = 1.0f;
      if (row_block < n / 32 && kb < k_blocks) {
        const int at = (row_block / tile) * per_row + kb / tile;
        value = scales.f32 ? static_cast<const float*>(scales.data)[at]
                           : ue8m0_scale(static_cast<const uint8_t*>(scales.data)[at]);
      }
      block_scales[p] = value;
    }
  }
  // A resident weight's first stages load before the wait for the previous kernel (launched with
  // launch_dependent): they do not depend on it, and a projection this small is mostly the latency of its first
  // loads. x, the previous kernel's output, is read after the wait, and so is a weight that kernel may have
  // written (early_weights false). (The first commit group holds the early weights too.)
  if (early_weights) {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i)
      if (i < num_tiles) stage_weights(i);
  }
  begin_dependent_kernel();
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < num_tiles) {
      if (!early_weights) stage_weights(i);
      stage_x(i);
    }
    cp_async_commit();
  }

  float acc[kMTiles][2][4] = {};
  const int b_offset = (warp * 16 + (lane & 7) + 8 * (lane >> 4)) * kStride + 8 * ((lane >> 3) & 1);
  const int b8_offset = (warp * 16 + g) * kStride8 + 2 * t;  // FP8: this lane's pairs of row g (and g + 8)
  const int a_offset = (lane & 15) * kStride + 8 * (lane >> 4);
  const float* warp_scales = block_scales + (warp / 2) * (kFp8 ? num_tiles * (kTileK / 32) : 0);
  for (int i = 0; i < num_tiles; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile i landed for every thread; every warp has left tile i - 1, whose buffer refills now
    if (i + kStages - 1 < num_tiles) stage_weights(i + kStages - 1), stage_x(i + kStages - 1);
    cp_async_commit();
    const unsigned char* weights = stage(i);
    const __nv_bfloat16* x_rows = stage_x_rows(i);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t b[4];
      if constexpr (kFp8) {
        const float scale = warp_scales[i * (kTileK / 32) + kk / 32];
        const uint8_t* row = weights + b8_offset + kk;
        b[0] = fp8_pair_fragment(row, scale);
        b[1] = fp8_pair_fragment(row + 8, scale);
        b[2] = fp8_pair_fragment(row + 8 * kStride8, scale);
        b[3] = fp8_pair_fragment(row + 8 * kStride8 + 8, scale);
      } else {
        ldmatrix_x4(b, reinterpret_cast<const __nv_bfloat16*>(weights) + b_offset + kk);
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        uint32_t a[4];
        ldmatrix_x4(a, x_rows + a_offset + mt * 16 * kStride + kk);
        mma_bf16(acc[mt][0], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_bf16(acc[mt][1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: they hold the partial sums now

  auto* sums = reinterpret_cast<float*>(shared_bytes);  // [kRows][kSumStride]
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int row = mt * 16 + g, col = warp * 16 + nt * 8 + 2 * t;
      *reinterpret_cast<float2*>(sums + row * kSumStride + col) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<float2*>(sums + (row + 8) * kSumStride + col) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
  cluster.sync();  // every block's partials are written (and visible across the cluster)

  constexpr int kGroups = kRows * kCols / 4;  // 4 consecutive outputs of a row
  for (int group = split * kThreads + threadIdx.x; group < kGroups; group += splits * kThreads) {
    const int row = group / (kCols / 4), col = 4 * (group % (kCols / 4));
    float4 total = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s = 0; s < splits; ++s) {
      const float4 part = *reinterpret_cast<const float4*>(cluster.map_shared_rank(sums, s) + row * kSumStride + col);
      total.x += part.x, total.y += part.y, total.z += part.z, total.w += part.w;
    }
    const int out_col = col0 + col;
    if (row >= m || out_col >= n) continue;
    const int64_t at = blockIdx.z * layout.y_batch + row * layout.y_row + out_col;
    if (out_col + 4 <= n && at % 4 == 0) {
      if (y_fp32) {
        *reinterpret_cast<float4*>(static_cast<float*>(y) + at) = total;
      } else {
        const __nv_bfloat162 pair[2] = {__floats2bfloat162_rn(total.x, total.y),
                                        __floats2bfloat162_rn(total.z, total.w)};
        *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(y) + at) = *reinterpret_cast<const uint2*>(pair);
      }
    } else {  // the last, partial group of columns, or an output not 4-element aligned
      const float values[4] = {total.x, total.y, total.z, total.w};
      for (int j = 0; j < 4 && out_col + j < n; ++j) {
        if (y_fp32) static_cast<float*>(y)[at + j] = values[j];
        else static_cast<__nv_bfloat16*>(y)[at + j] = __float2bfloat16(values[j]);
      }
    }
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
}

template <int kMTiles, bool kFp8>
void launch(const __nv_bfloat16* x, const void* w, Fp8BlockScales scales, void* y, bool y_fp32, int64_t batch,
            int64_t m, int64_t n, int64_t k, GemvLayout layout, int num_sms, cudaStream_t stream, WeightSource source) {
  constexpr auto kernel = skinny_kernel<kMTiles, kFp8>;
  constexpr size_t shared = Layout<kMTiles, kFp8>::kSharedBytes;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  // Two blocks an SM: split k until the tiles fill them (never below 2 k tiles a block, at most a portable
  // cluster).
  const int64_t col_tiles = (n + kCols - 1) / kCols, k_tiles = (k + kTileK - 1) / kTileK;
  const int64_t wanted = std::max<int64_t>(1, 2 * num_sms / (col_tiles * batch));
  const int splits = static_cast<int>(std::clamp<int64_t>(std::min(wanted, k_tiles / 2), 1, kMaxSplits));
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(splits), static_cast<unsigned>(batch));
  launch_dependent_clustered(kernel, grid, kThreads, shared, stream, static_cast<unsigned>(splits), x, w, scales, y,
                             y_fp32, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), layout,
                             source == WeightSource::kResident);
}

template <bool kFp8>
void launch_rows(const __nv_bfloat16* x, const void* w, Fp8BlockScales scales, void* y, bool y_fp32, int64_t batch,
                 int64_t m, int64_t n, int64_t k, GemvLayout layout, int num_sms, cudaStream_t stream,
                 WeightSource source) {
  if (batch <= 0 || m <= 0 || n <= 0) return;
  if (m <= 16) return launch<1, kFp8>(x, w, scales, y, y_fp32, batch, m, n, k, layout, num_sms, stream, source);
  if (m <= 32) return launch<2, kFp8>(x, w, scales, y, y_fp32, batch, m, n, k, layout, num_sms, stream, source);
  if (m <= 48) return launch<3, kFp8>(x, w, scales, y, y_fp32, batch, m, n, k, layout, num_sms, stream, source);
  // m <= kLinearSkinnyMaxRows
  launch<4, kFp8>(x, w, scales, y, y_fp32, batch, m, n, k, layout, num_sms, stream, source);
}

}  // namespace

void linear_skinny(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                   int64_t k, int num_sms, cudaStream_t stream, WeightSource source) {
  launch_rows<false>(x, w, {}, y, y_fp32, 1, m, n, k, {k, 0, 0, n, 0, k}, num_sms, stream, source);
}

bool linear_skinny_fp8_supports(int64_t n, int64_t k, Fp8BlockScales scales) {
  return n % 32 == 0 && k % 32 == 0 && k / 32 <= kMaxScaleBlocks && (!scales.f32 || scales.block % 32 == 0);
}

void linear_skinny_fp8(const __nv_bfloat16* x, const uint8_t* codes, Fp8BlockScales scales, void* y, bool y_fp32,
                       int64_t m, int64_t n, int64_t k, int num_sms, cudaStream_t stream) {
  if (!linear_skinny_fp8_supports(n, k, scales)) return;  // the caller checks
  launch_rows<true>(x, codes, scales, y, y_fp32, 1, m, n, k, {k, 0, 0, n, 0, k}, num_sms, stream,
                    WeightSource::kResident);
}

void batched_linear_skinny(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t batch,
                           int64_t m, int64_t n, int64_t k, GemvLayout layout, int num_sms, cudaStream_t stream,
                           WeightSource source) {
  launch_rows<false>(x, w, {}, y, false, batch, m, n, k, layout, num_sms, stream, source);
}

}  // namespace deepinfer::cuda
