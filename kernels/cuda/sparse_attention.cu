#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sparse_attention.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;  // heads a block
constexpr int kRegs = static_cast<int>(kSparseMaxHeadDim / 32);
constexpr int64_t kBlockTokens = 64;

// The row's first window position: p - window + 1, at least 0 and the row's floor (bounded replay); above p where
// the floor is.
__device__ __forceinline__ int64_t window_start(const SparseWindowKeys& k, int64_t r, int64_t p) {
  const int64_t floor = k.window_floors != nullptr ? k.window_floors[r] : 0;
  const int64_t start = p - k.window + 1;
  return start > floor ? start : floor > 0 ? floor : 0;
}

__global__ void __launch_bounds__(kWarps * 32) sparse_window_kernel(const __nv_bfloat16* q, SparseWindowKeys k,
                                                                     const float* sinks, int64_t heads,
                                                                     int64_t head_dim, float scale,
                                                                     __nv_bfloat16* out) {
  begin_dependent_kernel();
  __shared__ __nv_bfloat16 decoded[kWarps][kSparseMaxHeadDim];  // each warp's window key, decoded from FP8
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x, h = blockIdx.y * kWarps + warp;
  if (h >= heads) return;
  WarpOnlineAttention<kRegs, kRegs> attn;
  attn.start(q + (r * heads + h) * head_dim, head_dim, lane, true);
  // The sink: exp(sink) in the denominator from the start, no value.
  attn.running_max = sinks[h];
  attn.running_sum = 1.0f;
  const int64_t p = k.positions[r];
  __nv_bfloat16* key = decoded[warp];
  for (int64_t j = window_start(k, r, p); j <= p; ++j) {
    const int64_t slot = k.block_table[r * k.max_blocks + j / kBlockTokens] * kBlockTokens + j % kBlockTokens;
    for (int64_t d = lane; d < head_dim; d += 32)
      key[d] = to_bf16(e4m3x2_to_float2(k.window_codes[slot * head_dim + d]).x *
                       ue8m0_to_float(k.window_scales[slot * (head_dim / 32) + d / 32]));
    __syncwarp();
    attn.add(attn.dot(key, head_dim, lane, head_dim, 0) * scale, key, head_dim, lane);
    __syncwarp();  // every lane has read the key before the next overwrites it
  }
  if (k.extra_offsets != nullptr)
    for (int64_t i = k.extra_offsets[r]; i < k.extra_offsets[r + 1]; ++i) {
      const int32_t id = k.extra_ids[i];
      if (id < 0) continue;  // padding
      const __nv_bfloat16* key = k.extra + static_cast<int64_t>(id) * head_dim;
      attn.add(attn.dot(key, head_dim, lane, head_dim, 0) * scale, key, head_dim, lane);
    }
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < head_dim) out[(r * heads + h) * head_dim + d] = to_bf16(attn.acc[i] / attn.running_sum);
  }
}


// Tensor-core form for head_dim 512 (V4.1's width), FlashMLA's sparse shape on mma.sync: one block per (row, group
// of 16 heads), the row's keys (its window, then its picks) gathered kKeys at a time into shared memory by
// cp.async, two buffers (the next tile loads while this one computes). Per tile S[16 heads, kKeys] = Q . K^T by
// m16n8k16 bf16 MMAs (score warp w takes keys [16w, 16w + 16)), an online softmax whose row statistics the
// score warps combine through shared memory (P rounded to bf16 for the second product), then O[16, 512] += P . V
// (every warp 64 value columns). The sink starts each head's running sum at exp(sink - sink) = 1. The same tile
// discipline as the MLA decode kernel (mla_decode.cu), whose measurements chose it.
constexpr int kMmaHeads = 16;
constexpr int kMmaDim = 512;
constexpr int kPad = 8;  // bf16 elements of padding per shared row: consecutive rows start 4 banks apart

template <int kKeys, int kBuffers>
struct SparseTile {
  static constexpr int kStride = kMmaDim + kPad, kPieces = kMmaDim / 8;
  static constexpr int kTilesPerWarp = kMmaDim / (8 * kWarps);  // 8-column output n-tiles per warp
  static constexpr int kScoreWarps = kKeys / 16;
  static constexpr int kKeysPerWarp = kKeys / kWarps;  // keys each warp stages
  static constexpr size_t kSharedBytes = (kMmaHeads + kBuffers * kKeys) * kStride * sizeof(__nv_bfloat16) +
                                         kMmaHeads * (kKeys + kPad) * sizeof(__nv_bfloat16) +
                                         kScoreWarps * kMmaHeads * sizeof(float) + kBuffers * kKeys * sizeof(int);
  static_assert(kKeys % 16 == 0 && kScoreWarps <= kWarps && kKeysPerWarp >= 1 && kKeysPerWarp <= 32);
};

template <int kKeys, int kBuffers>
__global__ void __launch_bounds__(kWarps * 32, 2) sparse_window_mma_kernel(const __nv_bfloat16* q, SparseWindowKeys k,
                                                                            const float* sinks, int heads, float scale,
                                                                            __nv_bfloat16* out) {
  using Tile = SparseTile<kKeys, kBuffers>;
  constexpr int kStride = Tile::kStride, kPieces = Tile::kPieces, kTilesPerWarp = Tile::kTilesPerWarp;
  constexpr int kScoreWarps = Tile::kScoreWarps;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(shared_bytes);                   // [16][kStride]
  __nv_bfloat16* kt = qs + kMmaHeads * kStride;                                // [kBuffers][kKeys][kStride]
  __nv_bfloat16* ps = kt + kBuffers * kKeys * kStride;                         // [16][kKeys + kPad]
  auto* row_stat = reinterpret_cast<float*>(ps + kMmaHeads * (kKeys + kPad));  // [kScoreWarps][16]
  int* key_kind = reinterpret_cast<int*>(row_stat + kScoreWarps * kMmaHeads);  // [kBuffers][kKeys]

  begin_dependent_kernel();
  const int64_t r = blockIdx.x;
  const int head0 = blockIdx.y * kMmaHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t p = k.positions[r];
  const int64_t first_window = window_start(k, r, p);
  const int num_window = first_window > p ? 0 : static_cast<int>(p - first_window + 1);
  const int extra_begin = k.extra_offsets != nullptr ? k.extra_offsets[r] : 0;
  const int num_keys = num_window + (k.extra_offsets != nullptr ? k.extra_offsets[r + 1] - extra_begin : 0);
  const int num_tiles = (num_keys + kKeys - 1) / kKeys;
  const int32_t* table = k.block_table + r * k.max_blocks;

  // Warp w stages keys w, w + 8, ... of a tile: its lanes find their keys' addresses together (one block-table
  // or id latency per tile, not per key), then 16-byte asynchronous copies. A picked entry (bf16) fills its row; a
  // window key's 512 codes go to the row's second half and its 16 scale bytes to the row's padding, decoded in
  // place once they have arrived (decode_window_rows). Keys past the end and padding ids are zero-filled; key_kind
  // says which is which (0: masked, 1: window, 2: picked).
  const __nv_bfloat16* no_source = k.extra != nullptr ? k.extra : q;  // any valid address: zero-length copies
  auto stage = [&](int tile) {
    __nv_bfloat16* buffer = kt + (tile % kBuffers) * kKeys * kStride;
    const void* lane_src = no_source;
    const void* lane_scales = no_source;
    int lane_kind = 0;
    const int lane_key = tile * kKeys + warp + kWarps * lane;
    if (lane < Tile::kKeysPerWarp && lane_key < num_keys) {
      if (lane_key < num_window) {
        const int64_t j = first_window + lane_key;
        const int64_t slot = table[j / kBlockTokens] * kBlockTokens + j % kBlockTokens;
        lane_src = k.window_codes + slot * kMmaDim;
        lane_scales = k.window_scales + slot * (kMmaDim / 32);
        lane_kind = 1;
      } else {
        const int32_t id = k.extra_ids[extra_begin + lane_key - num_window];
        if (id >= 0) lane_src = k.extra + static_cast<int64_t>(id) * kMmaDim, lane_kind = 2;
      }
    }
#pragma unroll
    for (int i = 0; i < Tile::kKeysPerWarp; ++i) {
      const auto* src = reinterpret_cast<const unsigned char*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(lane_src), i));
      const auto* src_scales = reinterpret_cast<const unsigned char*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(lane_scales), i));
      const int kind = __shfl_sync(0xffffffffu, lane_kind, i);
      const int row = warp + kWarps * i;
      auto* dst = reinterpret_cast<unsigned char*>(buffer + row * kStride);
      if (lane == 0) key_kind[(tile % kBuffers) * kKeys + row] = kind;
      if (kind == 1) {
        cp_async_16(dst + kMmaDim + 16 * lane, src + 16 * lane, true);  // 32 lanes x 16 codes
        if (lane == 0) cp_async_16(dst + 2 * kMmaDim, src_scales, true);
      } else {
#pragma unroll
        for (int v = 0; v < kPieces / 32; ++v) cp_async_16(dst + 16 * (lane + 32 * v), src + 16 * (lane + 32 * v), kind == 2);
      }
    }
  };
  // This warp's window rows of a tile whose copies (this warp's own) have landed: codes and scales read first,
  // then the row rewritten as bf16 (lane l values [16 l, 16 l + 16), scale byte l / 2).
  auto decode_window_rows = [&](int tile) {
    __nv_bfloat16* buffer = kt + (tile % kBuffers) * kKeys * kStride;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < Tile::kKeysPerWarp; ++i) {
      const int row = warp + kWarps * i;
      if (key_kind[(tile % kBuffers) * kKeys + row] != 1) continue;
      auto* bytes = reinterpret_cast<unsigned char*>(buffer + row * kStride);
      const uint4 codes = *reinterpret_cast<const uint4*>(bytes + kMmaDim + 16 * lane);
      const float row_scale = ue8m0_to_float(bytes[2 * kMmaDim + lane / 2]);
      __syncwarp();
      uint4 values[2];
      e4m3x16_to_bf16(codes, row_scale, values);
      reinterpret_cast<uint4*>(bytes)[2 * lane] = values[0];
      reinterpret_cast<uint4*>(bytes)[2 * lane + 1] = values[1];
    }
  };
  constexpr int kPrologue = kBuffers > 1 ? kBuffers - 1 : 1;
#pragma unroll
  for (int tile = 0; tile < kPrologue; ++tile) {
    if (tile < num_tiles) stage(tile);
    cp_async_commit();
  }
  for (int idx = threadIdx.x; idx < kMmaHeads * kPieces; idx += kWarps * 32) {  // Q in 16-byte pieces
    const int row = idx / kPieces, piece = idx % kPieces;
    uint4 value = {0u, 0u, 0u, 0u};
    if (head0 + row < heads) value = reinterpret_cast<const uint4*>(q + (r * heads + head0 + row) * kMmaDim)[piece];
    *reinterpret_cast<uint4*>(qs + row * kStride + 8 * piece) = value;
  }

  float o[kTilesPerWarp][4] = {};
  float m_run[2], l_run[2] = {1.0f, 1.0f};  // rows g and g + 8: the sink's exp(sink - sink)
#pragma unroll
  for (int i = 0; i < 2; ++i) m_run[i] = head0 + g + 8 * i < heads ? sinks[head0 + g + 8 * i] : 0.0f;

  const int row16 = (lane & 7) + 8 * ((lane >> 3) & 1), half = 8 * (lane >> 4);  // x4 lane -> (row, column)
  const bool scores = warp < kScoreWarps;
  const int key0 = warp * 16 + 2 * t;  // this lane's first score column; n-tile n adds 8 n
  for (int tile = 0; tile < num_tiles; ++tile) {
    // The buffer refilled here was read in the previous iteration, which every warp has left (last barrier).
    const int next = kBuffers > 1 ? tile + kBuffers - 1 : tile;
    if (next >= kPrologue && next < num_tiles) stage(next);
    cp_async_commit();
    cp_async_wait<kBuffers - 1>();
    decode_window_rows(tile);
    __syncthreads();  // this tile (every warp's rows and key_kind marks) is in shared memory
    const __nv_bfloat16* kv = kt + (tile % kBuffers) * kKeys * kStride;
    const int* kind = key_kind + (tile % kBuffers) * kKeys;

    float s[2][4];  // [n-tile][fragment]: keys key0 + 8 n + {0, 1} of rows g and g + 8
    if (scores) {
      float chains[2][2][4] = {};  // [chain][n-tile][fragment]: two accumulator chains, summed at the end
      const __nv_bfloat16* q_lane = qs + row16 * kStride + half;
      const __nv_bfloat16* k_lane = kv + (warp * 16 + (lane & 7) + 8 * (lane >> 4)) * kStride + 8 * ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < kMmaDim; kk += 16) {
        uint32_t a[4], bk[4];
        ldmatrix_x4(a, q_lane + kk);
        ldmatrix_x4(bk, k_lane + kk);
        float(&chain)[2][4] = chains[(kk / 16) % 2];
        mma_bf16(chain[0], a[0], a[1], a[2], a[3], bk[0], bk[1]);
        mma_bf16(chain[1], a[0], a[1], a[2], a[3], bk[2], bk[3]);
      }
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          s[n][i] = kind[key0 + 8 * n + (i & 1)] != 0 ? (chains[0][n][i] + chains[1][n][i]) * scale : -INFINITY;
      float mx[2] = {fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])),
                     fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]))};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      }
      if (t == 0) row_stat[warp * kMmaHeads + g] = mx[0], row_stat[warp * kMmaHeads + g + 8] = mx[1];
    }
    __syncthreads();
    float new_m[2], correction[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int w = 0; w < kScoreWarps; ++w) tile_max = fmaxf(tile_max, row_stat[w * kMmaHeads + g + 8 * i]);
      new_m[i] = fmaxf(m_run[i], tile_max);  // finite: m_run starts at the sink
      correction[i] = expf(m_run[i] - new_m[i]);
    }
    __syncthreads();  // row_stat is reused for the sums
    if (scores) {
      float e[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) e[n][i] = expf(s[n][i] - new_m[i / 2]);
      float sum[2] = {(e[0][0] + e[0][1]) + (e[1][0] + e[1][1]), (e[0][2] + e[0][3]) + (e[1][2] + e[1][3])};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
      }
      if (t == 0) row_stat[warp * kMmaHeads + g] = sum[0], row_stat[warp * kMmaHeads + g + 8] = sum[1];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        *reinterpret_cast<uint32_t*>(ps + g * (kKeys + kPad) + key0 + 8 * n) = pack_floats(e[n][0], e[n][1]);
        *reinterpret_cast<uint32_t*>(ps + (g + 8) * (kKeys + kPad) + key0 + 8 * n) = pack_floats(e[n][2], e[n][3]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tile_sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kScoreWarps; ++w) tile_sum += row_stat[w * kMmaHeads + g + 8 * i];
      l_run[i] = l_run[i] * correction[i] + tile_sum;
      m_run[i] = new_m[i];
    }
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      o[j][0] *= correction[0];
      o[j][1] *= correction[0];
      o[j][2] *= correction[1];
      o[j][3] *= correction[1];
    }
    // A = P by ldmatrix; B = V (key-major in the tile) by ldmatrix.trans, two 8-column n-tiles per load.
    const __nv_bfloat16* p_lane = ps + row16 * (kKeys + kPad) + half;
#pragma unroll
    for (int kk = 0; kk < kKeys; kk += 16) {
      uint32_t a[4];
      ldmatrix_x4(a, p_lane + kk);
      const __nv_bfloat16* v_lane = kv + (kk + row16) * kStride + warp * kTilesPerWarp * 8 + half;
#pragma unroll
      for (int j = 0; j < kTilesPerWarp; j += 2) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, v_lane + j * 8);
        mma_bf16(o[j], a[0], a[1], a[2], a[3], bv[0], bv[1]);
        mma_bf16(o[j + 1], a[0], a[1], a[2], a[3], bv[2], bv[3]);
      }
    }
    __syncthreads();  // every warp is done with this tile's buffer and with ps before they are refilled
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int h = head0 + g + 8 * i;
    if (h >= heads) continue;
    const float weight = 1.0f / l_run[i];
    __nv_bfloat16* o_row = out + (r * heads + h) * kMmaDim;
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int col = (warp * kTilesPerWarp + j) * 8 + 2 * t;
      *reinterpret_cast<__nv_bfloat162*>(o_row + col) =
          __floats2bfloat162_rn(weight * o[j][2 * i], weight * o[j][2 * i + 1]);
    }
  }
}

// 16-byte aligned rows everywhere the tensor-core kernel copies from.
bool mma_supported(const SparseWindowKeys& k, int64_t head_dim) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return head_dim == kMmaDim && aligned(k.window_codes) && aligned(k.window_scales) &&
         (k.extra_offsets == nullptr || aligned(k.extra));
}

}  // namespace

void sparse_window_attention(const __nv_bfloat16* q, const SparseWindowKeys& keys, const float* sinks, int64_t rows,
                             int64_t heads, int64_t head_dim, float scale, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows == 0 || head_dim > kSparseMaxHeadDim || head_dim % 32 != 0) return;  // the model checks head_dim
  if (mma_supported(keys, head_dim)) {
    using Tile = SparseTile<32, 2>;
    constexpr auto kernel = sparse_window_mma_kernel<32, 2>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tile::kSharedBytes));
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((heads + kMmaHeads - 1) / kMmaHeads));
    launch_dependent(kernel, grid, kWarps * 32, Tile::kSharedBytes, stream, q, keys, sinks, static_cast<int>(heads),
                     scale, out);
    return;
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((heads + kWarps - 1) / kWarps));
  launch_dependent(sparse_window_kernel, grid, kWarps * 32, 0, stream, q, keys, sinks, heads, head_dim, scale, out);
}

}  // namespace deepinfer::cuda
