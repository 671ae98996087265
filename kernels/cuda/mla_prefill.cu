#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/mla_prefill_tma.cuh"
#include "kernels/cuda/mla_prefill_wgmma.cuh"
#include "kernels/cuda/mma.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;  // rows per tile, one warp each
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 32;
constexpr int kMaxQkRegs = 8;  // nope + rope <= 256
constexpr int kMaxVRegs = 8;   // v <= 256

__global__ void __launch_bounds__(kThreads) prefill_kernel(
    const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe, int64_t k_pe_stride,
    const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, const int32_t* tiles, int64_t heads, int64_t nope,
    int64_t rope, int64_t v_dim, float scale, __nv_bfloat16* out) {
  extern __shared__ __nv_bfloat16 keys[];  // [kTileKeys][nope + v + rope]
  const int64_t h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row_begin = tiles[blockIdx.x], row_end = tiles[blockIdx.x + 1];
  const int64_t r = row_begin + warp;
  const bool active = r < row_end;
  const int64_t seq = q_seq[row_begin];
  const int64_t key_begin = cu_k[seq];
  const int64_t visible = active ? q_pos[r] + 1 : 0;
  const int64_t tile_keys = q_pos[row_end - 1] + 1;  // the tile's last row sees the most keys
  const int64_t qk = nope + rope, width = nope + v_dim + rope;

  WarpOnlineAttention<kMaxQkRegs, kMaxVRegs> attn;
  attn.start(q + (r * heads + h) * qk, qk, lane, active);

  for (int64_t base = 0; base < tile_keys; base += kTileKeys) {
    const int64_t count = min(static_cast<int64_t>(kTileKeys), tile_keys - base);
    __syncthreads();
    for (int64_t t = warp; t < count; t += kWarps) {  // staged row: [k_nope | v | k_pe] of key base + t, head h
      const int64_t key = key_begin + base + t;
      const __nv_bfloat16* src = kv + (key * heads + h) * (nope + v_dim);
      __nv_bfloat16* dst = keys + t * width;
      for (int64_t d = lane; d < nope + v_dim; d += 32) dst[d] = src[d];
      for (int64_t d = lane; d < rope; d += 32) dst[nope + v_dim + d] = k_pe[key * k_pe_stride + d];
    }
    __syncthreads();
    const int64_t mine = min(count, visible - base);  // causal: this row's keys within the tile
    for (int64_t t = 0; t < mine; ++t) {
      const __nv_bfloat16* k = keys + t * width;  // [k_nope | v | k_pe]: k_pe sits after v
      attn.add(attn.dot(k, qk, lane, nope, v_dim) * scale, k + nope, v_dim, lane);
    }
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kMaxVRegs; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < v_dim) out[(r * heads + h) * v_dim + d] = to_bf16(attn.acc[i] / attn.running_sum);
  }
}

// Tensor-core form (FlashAttention-2's shape): one block per (tile of up to 64 rows of one sequence, head), four
// warps of 16 rows each. Per 64-key tile staged in shared memory by cp.async as [k_nope | k_pe] and [v], its
// MMA fragments read by ldmatrix (ldmatrix.trans for V): each warp computes
// S[16, 64] = Q K^T with m16n8k16 bf16 MMAs, masks causally, keeps its rows' online softmax in registers, and
// feeds P straight from the S accumulators (their layout is the A operand's) into O[16, v] += P V.
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kMmaRows = 16 * kMmaWarps;
constexpr int kMmaKeys = 64;
constexpr int kKeyTiles = kMmaKeys / 8;
constexpr int kPad = 8;  // shifts rows across banks; keeps 16-byte alignment

template <int kVTiles>  // v_dim / 8 output n-tiles of 8 columns
__global__ void __launch_bounds__(kMmaThreads) prefill_mma_kernel(
    const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe, int64_t k_pe_stride,
    const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, const int32_t* tiles, int64_t heads, int64_t nope,
    int64_t rope, float scale, __nv_bfloat16* out) {
  constexpr int64_t v_dim = kVTiles * 8, v_stride = v_dim + kPad;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int64_t qk = nope + rope, qk_stride = qk + kPad;
  auto* qs = reinterpret_cast<__nv_bfloat16*>(shared_bytes);  // [64 rows][qk_stride]
  __nv_bfloat16* ks = qs + kMmaRows * qk_stride;              // [64 keys][qk_stride]: k_nope | k_pe
  __nv_bfloat16* vs = ks + kMmaKeys * qk_stride;              // [64 keys][v_stride]

  const int64_t h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t row_begin = tiles[blockIdx.x], row_end = tiles[blockIdx.x + 1];
  const int64_t key_begin = cu_k[q_seq[row_begin]];
  const int64_t tile_keys = q_pos[row_end - 1] + 1;  // the tile's last row sees the most keys
  const int64_t warp_row = row_begin + 16 * warp;
  // Keys this warp's rows can see; a warp past the tile's rows sees none and only helps to stage.
  const int64_t warp_keys = warp_row < row_end ? q_pos[min(warp_row + 15, row_end - 1)] + 1 : 0;
  // Positions of this lane's two rows (-1 past the tile: their scores stay finite and are never written).
  int64_t pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) pos[r] = warp_row + g + 8 * r < row_end ? q_pos[warp_row + g + 8 * r] : -1;

  const int64_t qk_chunks = qk / 8;
  for (int64_t idx = threadIdx.x; idx < kMmaRows * qk_chunks; idx += kMmaThreads) {
    const int64_t row = idx / qk_chunks, chunk = idx % qk_chunks;
    reinterpret_cast<uint4*>(qs + row * qk_stride)[chunk] =
        row_begin + row < row_end ? reinterpret_cast<const uint4*>(q + ((row_begin + row) * heads + h) * qk)[chunk]
                                  : make_uint4(0, 0, 0, 0);
  }
  float o[kVTiles][4] = {};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  const int64_t nope_chunks = nope / 8, key_chunks = qk_chunks + v_dim / 8;
  for (int64_t base = 0; base < tile_keys; base += kMmaKeys) {
    const int64_t count = min(static_cast<int64_t>(kMmaKeys), tile_keys - base);
    __syncthreads();  // the previous tile's readers are done
    for (int64_t idx = threadIdx.x; idx < kMmaKeys * key_chunks; idx += kMmaThreads) {
      const int64_t key = idx / key_chunks, chunk = idx % key_chunks;
      __nv_bfloat16* dst = chunk < qk_chunks ? ks + key * qk_stride + 8 * chunk : vs + key * v_stride + 8 * (chunk - qk_chunks);
      const bool valid = key < count;  // past the keys: zeros (masked below)
      const int64_t src_key = valid ? key_begin + base + key : 0;
      const __nv_bfloat16* row = kv + (src_key * heads + h) * (nope + v_dim);
      const __nv_bfloat16* src = chunk < nope_chunks ? row + 8 * chunk
                                 : chunk < qk_chunks ? k_pe + src_key * k_pe_stride + 8 * (chunk - nope_chunks)
                                                     : row + 8 * (nope_chunks + chunk - qk_chunks);
      cp_async_16(dst, src, valid);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (base >= warp_keys) continue;  // every warp still reaches the next tile's barrier

    // S = Q K^T, fragments by ldmatrix: Q rows of this warp; K two 8-key tiles per load.
    float s[kKeyTiles][4] = {};
    const int row16 = (lane & 7) + 8 * ((lane >> 3) & 1), half = 8 * (lane >> 4);
    const __nv_bfloat16* q_lane = qs + (16 * warp + row16) * qk_stride + half;
    const __nv_bfloat16* k_lane = ks + ((lane & 7) + half) * qk_stride + 8 * ((lane >> 3) & 1);
    for (int64_t kk = 0; kk < qk; kk += 16) {
      uint32_t a[4];
      ldmatrix_x4(a, q_lane + kk);
#pragma unroll
      for (int j = 0; j < kKeyTiles; j += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, k_lane + 8 * j * qk_stride + kk);
        mma_bf16(s[j], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_bf16(s[j + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t key = base + 8 * j + 2 * t + (i & 1), p_row = pos[i / 2];
        s[j][i] = p_row < 0 ? 0.0f : (key <= p_row ? s[j][i] * scale : -INFINITY);
        mx[i / 2] = fmaxf(mx[i / 2], s[j][i]);
      }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float new_m = fmaxf(m_run[r], mx[r]);
      // A row with no visible key yet (only possible before its first tile) keeps its state.
      correction[r] = new_m == -INFINITY ? 1.0f : expf(m_run[r] - new_m);
      m_run[r] = new_m;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[j][i] = m_run[i / 2] == -INFINITY ? 0.0f : expf(s[j][i] - m_run[i / 2]);
        sum[i / 2] += s[j][i];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      l_run[r] = l_run[r] * correction[r] + sum[r];
    }
#pragma unroll
    for (int j = 0; j < kVTiles; ++j) {
      o[j][0] *= correction[0];
      o[j][1] *= correction[0];
      o[j][2] *= correction[1];
      o[j][3] *= correction[1];
    }
#pragma unroll
    for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
      const uint32_t a0 = pack_floats(s[2 * kk][0], s[2 * kk][1]), a1 = pack_floats(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = pack_floats(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = pack_floats(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const __nv_bfloat16* v_lane = vs + (16 * kk + row16) * v_stride + half;  // ldmatrix.trans: V is key-major
#pragma unroll
      for (int j = 0; j < kVTiles; j += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_lane + 8 * j);
        mma_bf16(o[j], a0, a1, a2, a3, b[0], b[1]);
        mma_bf16(o[j + 1], a0, a1, a2, a3, b[2], b[3]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = warp_row + g + 8 * r;
    if (row >= row_end) continue;
    auto* dst = reinterpret_cast<uint32_t*>(out + (row * heads + h) * v_dim + 2 * t);
#pragma unroll
    for (int j = 0; j < kVTiles; ++j) dst[4 * j] = pack_floats(o[j][2 * r] / l_run[r], o[j][2 * r + 1] / l_run[r]);
  }
}

}  // namespace

bool mla_prefill_uses_mma(int64_t nope, int64_t rope, int64_t v_dim) {
  return v_dim == 128 && (nope + rope) % 16 == 0 && nope % 8 == 0 && rope % 8 == 0;
}

std::vector<int32_t> mla_prefill_tiles(const std::vector<int32_t>& q_seq, int64_t nope, int64_t rope, int64_t v_dim,
                                       MlaPrefillKernel kernel) {
  const int64_t rows_per_tile = kernel == MlaPrefillKernel::kTma && mla_prefill_tma_supports(nope, rope, v_dim)
                                    ? kMlaPrefillTmaRows
                                : mla_prefill_uses_mma(nope, rope, v_dim) ? kMmaRows
                                                                          : kWarps;
  std::vector<int32_t> tiles;
  for (size_t r = 0; r < q_seq.size(); ++r)
    if (tiles.empty() || q_seq[r] != q_seq[r - 1] || static_cast<int64_t>(r) - tiles.back() == rows_per_tile)
      tiles.push_back(static_cast<int32_t>(r));
  tiles.push_back(static_cast<int32_t>(q_seq.size()));
  return tiles;
}

bool mla_prefill_supports(int64_t nope, int64_t rope, int64_t v_dim) {
  return nope + rope <= 32 * kMaxQkRegs && v_dim <= 32 * kMaxVRegs;
}

bool mla_prefill_attention(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                           int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k,
                           const int32_t* tiles, int64_t num_tiles, int64_t heads, int64_t nope, int64_t rope,
                           int64_t v_dim, float scale, __nv_bfloat16* out, cudaStream_t stream, MlaPrefillKernel kernel,
                           int64_t q_rows, int64_t k_rows) {
  if (num_tiles == 0) return true;
  if (!mla_prefill_supports(nope, rope, v_dim)) return false;
  // The warpgroup-MMA kernels' grids take the tiles in their second dimension (every head's heaviest first).
  constexpr int64_t kMaxGridTiles = 65535;
  if (kernel == MlaPrefillKernel::kTma && mla_prefill_tma_supports(nope, rope, v_dim))  // its 128-row tiles
    return q_rows > 0 && k_rows > 0 && num_tiles <= kMaxGridTiles &&
           mla_prefill_tma(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles, num_tiles, heads, q_rows, k_rows,
                           scale, out, stream);
  if (kernel != MlaPrefillKernel::kMmaSync && mla_prefill_wgmma_supports(nope, rope, v_dim) &&
      num_tiles <= kMaxGridTiles) {
    mla_prefill_wgmma(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles, num_tiles, heads, scale, out, stream);
    return true;  // (the same 64-row tiles as mla_prefill_uses_mma's)
  }
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(heads));
  if (mla_prefill_uses_mma(nope, rope, v_dim)) {
    const size_t shared =
        ((kMmaRows + kMmaKeys) * (nope + rope + kPad) + kMmaKeys * (v_dim + kPad)) * sizeof(__nv_bfloat16);
    cudaFuncSetAttribute(prefill_mma_kernel<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    prefill_mma_kernel<16><<<grid, kMmaThreads, shared, stream>>>(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles,
                                                                  heads, nope, rope, scale, out);
    return true;
  }
  const size_t shared = kTileKeys * (nope + v_dim + rope) * sizeof(__nv_bfloat16);
  prefill_kernel<<<grid, kThreads, shared, stream>>>(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles, heads, nope,
                                                     rope, v_dim, scale, out);
  return true;
}

}  // namespace deepinfer::cuda
