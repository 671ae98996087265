#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_grouped.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 128;            // weight rows a block streams (output columns, or 64 gate + 64 up)
constexpr int kTileK = 64;                // reduction depth of one pipeline stage
constexpr int kMaxRows = 64;              // expert rows per pass over the weights (four 16-row MMA tiles)
constexpr int kStages = 4;
constexpr unsigned kPassBlocks = 2;                // tiles in flight: 4 x 27 KiB, two blocks per SM
constexpr int kStride = kTileK + 8;       // padded shared row: ldmatrix rows land 4 banks apart
constexpr int kStageElems = (kTileRows + kMaxRows) * kStride;
constexpr size_t kSharedBytes = static_cast<size_t>(kStages) * kStageElems * sizeof(__nv_bfloat16);

// One block per (tile of weight rows, expert, pass parity). The block streams its weight rows through a
// kStages-deep cp.async pipeline once per pass of up to 64 of the expert's rows (decode: mostly one pass),
// and multiplies with m16n8k16 bf16 MMAs. Warp w owns two 16-row slices of the tile: with kSwiGLU the gate rows
// [16w, 16w + 16) and the matching up rows [64 + 16w, ...), so silu(gate) * up is formed in registers; otherwise
// rows [32w, 32w + 32).
template <bool kSwiGLU>
__global__ void __launch_bounds__(kThreads, 2)
    grouped_kernel(const __nv_bfloat16* x, const int32_t* offsets, int64_t k_dim, int64_t n_out,
                   const __nv_bfloat16* weights, __nv_bfloat16* out) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* smem = reinterpret_cast<__nv_bfloat16*>(shared_bytes);
  const int64_t expert = blockIdx.y, first = offsets[expert], count = offsets[expert + 1] - first;
  if (count <= 0) return;
  constexpr int kCols = kSwiGLU ? kTileRows / 2 : kTileRows;  // output columns of this block
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const __nv_bfloat16* w = weights + expert * (kSwiGLU ? 2 : 1) * n_out * k_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int k_tiles = static_cast<int>((k_dim + kTileK - 1) / kTileK);

  // Each thread copies the same 16-byte column `piece` of tile rows threadIdx.x / 8 + 16 j: their weight-row
  // pointers are fixed for the block (rows past the matrix are zero-filled), so a stage is pointer + offset.
  constexpr int kCopiesW = kTileRows * 8 / kThreads, kCopiesX = kMaxRows * 8 / kThreads;
  const int piece = threadIdx.x % 8, first_row = threadIdx.x / 8;
  const __nv_bfloat16* w_src[kCopiesW];
  bool w_valid[kCopiesW];
#pragma unroll
  for (int j = 0; j < kCopiesW; ++j) {
    const int r = first_row + 16 * j;
    const int64_t col = col0 + (kSwiGLU ? r % kCols : r);
    w_valid[j] = col < n_out;
    w_src[j] = w + (w_valid[j] ? col + (kSwiGLU && r >= kCols ? n_out : 0) : 0) * k_dim + 8 * piece;
  }
  // Tile rows this warp multiplies: two 16-row slices, each one ldmatrix.x4 (two 8-column n-tiles) per k step.
  const int slice[2] = {kSwiGLU ? 16 * warp : 32 * warp, kSwiGLU ? kCols + 16 * warp : 32 * warp + 16};

  for (int64_t pass = blockIdx.z * kMaxRows; pass < count; pass += gridDim.z * kMaxRows) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kMaxRows), count - pass));
    const int m_tiles = (rows + 15) / 16;
    const __nv_bfloat16* x_src = x + (first + pass + first_row) * k_dim + 8 * piece;  // + 16 i rows
    auto stage = [&](int kt, int slot) {
      __nv_bfloat16* ws = smem + slot * kStageElems + first_row * kStride + 8 * piece;
      __nv_bfloat16* as = ws + kTileRows * kStride;
      const int k = kt * kTileK;
      const bool k_valid = k + 8 * piece < k_dim;
#pragma unroll
      for (int j = 0; j < kCopiesW; ++j) {
        const bool valid = k_valid && w_valid[j];
        cp_async_16(ws + 16 * j * kStride, valid ? w_src[j] + k : w, valid);
      }
#pragma unroll
      for (int i = 0; i < kCopiesX; ++i) {
        if (first_row + 16 * i >= m_tiles * 16) break;
        const bool valid = k_valid && first_row + 16 * i < rows;
        cp_async_16(as + 16 * i * kStride, valid ? x_src + 16 * i * k_dim + k : x, valid);
      }
    };

    float acc[kMaxRows / 16][4][4] = {};  // [m-tile][n-tile: slice 0 (two), slice 1 (two)][fragment]
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < k_tiles) stage(s, s);
      cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile kt is in shared memory, and every warp is done with the slot refilled below
      if (kt + kStages - 1 < k_tiles) stage(kt + kStages - 1, (kt + kStages - 1) % kStages);
      cp_async_commit();
      const __nv_bfloat16* ws = smem + (kt % kStages) * kStageElems;
      const __nv_bfloat16* as = ws + kTileRows * kStride;
#pragma unroll
      for (int kk = 0; kk < kTileK; kk += 16) {
        uint32_t b[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s)
          ldmatrix_x4(b[s], ws + (slice[s] + (lane & 7) + 8 * (lane >> 4)) * kStride + kk + 8 * ((lane >> 3) & 1));
#pragma unroll
        for (int mt = 0; mt < kMaxRows / 16; ++mt) {
          if (mt >= m_tiles) break;
          uint32_t a[4];
          ldmatrix_x4(a, as + (mt * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * kStride + kk + 8 * (lane >> 4));
#pragma unroll
          for (int n = 0; n < 4; ++n) mma_bf16(acc[mt][n], a[0], a[1], a[2], a[3], b[n / 2][2 * (n % 2)], b[n / 2][2 * (n % 2) + 1]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the next pass restages every slot

#pragma unroll
    for (int mt = 0; mt < kMaxRows / 16; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + 8 * half;
        if (mt >= m_tiles || r >= rows) continue;
        __nv_bfloat16* o = out + (first + pass + r) * n_out;
        if constexpr (kSwiGLU) {
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const int64_t col = col0 + 16 * warp + 8 * n + 2 * t;
            if (col >= n_out) continue;
            const float g0 = acc[mt][n][2 * half], g1 = acc[mt][n][2 * half + 1];
            const float u0 = acc[mt][n + 2][2 * half], u1 = acc[mt][n + 2][2 * half + 1];
            *reinterpret_cast<__nv_bfloat162*>(o + col) =
                __floats2bfloat162_rn(g0 / (1.0f + expf(-g0)) * u0, g1 / (1.0f + expf(-g1)) * u1);
          }
        } else {
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const int64_t col = col0 + slice[n / 2] + 8 * (n % 2) + 2 * t;
            if (col >= n_out) continue;
            *reinterpret_cast<__nv_bfloat162*>(o + col) =
                __floats2bfloat162_rn(acc[mt][n][2 * half], acc[mt][n][2 * half + 1]);
          }
        }
      }
    }
  }
}

template <bool kSwiGLU>
void launch(const __nv_bfloat16* x, const int32_t* offsets, int64_t num_experts, int64_t k_dim, int64_t n_out,
            const __nv_bfloat16* weights, __nv_bfloat16* out, cudaStream_t stream) {
  if (num_experts == 0) return;
  cudaFuncSetAttribute(grouped_kernel<kSwiGLU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kSharedBytes));
  constexpr int kCols = kSwiGLU ? kTileRows / 2 : kTileRows;
  // z: an expert's passes alternate between kPassBlocks blocks, so a crowded expert (above 64 rows) does not
  // leave its tile to one block while the others idle; blocks past an expert's passes exit at once.
  const dim3 grid(static_cast<unsigned>((n_out + kCols - 1) / kCols), static_cast<unsigned>(num_experts), kPassBlocks);
  grouped_kernel<kSwiGLU><<<grid, kThreads, kSharedBytes, stream>>>(x, offsets, k_dim, n_out, weights, out);
}

}  // namespace

void moe_grouped_gate_up(const __nv_bfloat16* x, const int32_t* expert_offsets, int64_t num_experts, int64_t hidden,
                         int64_t inter, const __nv_bfloat16* gate_up, __nv_bfloat16* act, cudaStream_t stream) {
  launch<true>(x, expert_offsets, num_experts, hidden, inter, gate_up, act, stream);
}

void moe_grouped_down(const __nv_bfloat16* act, const int32_t* expert_offsets, int64_t num_experts, int64_t hidden,
                      int64_t inter, const __nv_bfloat16* down, __nv_bfloat16* y, cudaStream_t stream) {
  launch<false>(act, expert_offsets, num_experts, inter, hidden, down, y, stream);
}

}  // namespace deepinfer::cuda
