#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_decode_seesaw.cuh"
#include "kernels/cuda/mla_decode_wgmma.cuh"
#include "kernels/cuda/mma.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;              // one head per warp
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 16;          // cache entries staged in shared memory at a time
constexpr int kMaxDimRegs = 24;        // latent + rope <= 768
constexpr int kMaxLatentRegs = 16;     // latent <= 512

// One block per (sequence, KV split, group of 8 heads): the split's cache entries are staged in shared memory
// once per tile and read by all 8 heads (each warp one head), so the KV is read heads/8 times, not per head.
// Online softmax per warp; the partial result is [latent accumulators | running max | running sum].
__global__ void __launch_bounds__(kThreads, 2) decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                                    int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t heads,
                                    int64_t latent, int64_t rope, float scale, int64_t num_splits,
                                    int64_t keys_per_split, float* partial) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  extern __shared__ __nv_bfloat16 tile[];  // [kTileKeys][dim]
  const int64_t b = blockIdx.x, split = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t h = blockIdx.z * kWarps + warp;
  const bool active = h < heads;
  const int64_t dim = latent + rope;
  const int64_t len = seq_lens[b];
  const int64_t per_split = keys_per_split > 0 ? keys_per_split : (len + num_splits - 1) / num_splits;
  const int64_t begin = split * per_split, end = min(len, begin + per_split);

  WarpOnlineAttention<kMaxDimRegs, kMaxLatentRegs> attn;
  attn.start(q + (b * heads + h) * dim, dim, lane, active);

  for (int64_t tile_begin = begin; tile_begin < end; tile_begin += kTileKeys) {
    const int64_t tile_len = min(static_cast<int64_t>(kTileKeys), end - tile_begin);
    __syncthreads();  // the previous tile is no longer read
    // Warp w stages keys w, w + 8, ...: one block-table lookup per key, 16-byte loads along the entry
    // (entries are 16-byte aligned when dim is a multiple of 8, as 512 + 64 is; otherwise 2-byte loads).
    for (int64_t t = warp; t < tile_len; t += kWarps) {
      const int64_t j = tile_begin + t;
      const int64_t block = block_table[b * max_blocks_per_seq + j / kMlaBlockSize];
      const __nv_bfloat16* src = cache + (block * kMlaBlockSize + j % kMlaBlockSize) * dim;
      __nv_bfloat16* dst = tile + t * dim;
      if (dim % 8 == 0) {
        for (int64_t v = lane; v < dim / 8; v += 32)
          reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
      } else {
        for (int64_t d = lane; d < dim; d += 32) dst[d] = src[d];
      }
    }
    __syncthreads();
    if (!active) continue;
    for (int64_t t = 0; t < tile_len; ++t) {
      const __nv_bfloat16* entry = tile + t * dim;
      attn.add(attn.dot(entry, dim, lane, dim, 0) * scale, entry, latent, lane);
    }
  }
  if (!active) return;
  float* out = partial + ((b * heads + h) * num_splits + split) * (latent + 2);
#pragma unroll
  for (int i = 0; i < kMaxLatentRegs; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < latent) out[d] = attn.acc[i];
  }
  if (lane == 0) {
    out[latent] = attn.running_max;
    out[latent + 1] = attn.running_sum;
  }
}

// Tensor-core form (FlashMLA's shape, on mma.sync): one block per (sequence, KV split, group of 16 heads).
// Tiles of kKeys cache entries are staged in shared memory by cp.async into kBuffers buffers (with two, the
// next tile loads while this one computes). Per tile: S[16 heads, kKeys] = Q . K^T with m16n8k16 bf16 MMAs
// (score warp w takes keys [16w, 16w + 16)), an online softmax whose row statistics the score warps combine
// through shared memory, then O[16, latent] += P . V with the same MMAs (every warp w takes latent columns
// [w * latent / 8, ...)). The widths are compile-time constants and the index math 32-bit: measured with ncu,
// the kernel was bound by instruction issue (about 1,660 instructions a warp per 64-key tile, where the MMAs,
// fragment loads and copies need under 500).
constexpr int kMmaHeads = 16;
constexpr int kPad = 8;  // bf16 elements of padding per shared row: consecutive rows start 4 banks apart
constexpr int kMmaLatent = 512, kMmaRope = 64;  // DeepSeek's latent + rope: the widths the kernel is built for

template <int kLatent, int kRope, int kKeys, int kBuffers>
struct DecodeTile {
  static constexpr int kDim = kLatent + kRope, kStride = kDim + kPad, kPieces = kDim / 8;
  static constexpr int kTilesPerWarp = kLatent / (8 * kWarps);  // 8-column output n-tiles per warp
  static constexpr int kScoreWarps = kKeys / 16;  // 16 keys (two n-tiles) a score warp, one Q fragment for both
  static constexpr int kKeysPerWarp = kKeys / kWarps;  // keys each warp stages
  static constexpr size_t kSharedBytes = (kMmaHeads + kBuffers * kKeys) * kStride * sizeof(__nv_bfloat16) +
                                         kMmaHeads * (kKeys + kPad) * sizeof(__nv_bfloat16) +
                                         kScoreWarps * kMmaHeads * sizeof(float);
  static_assert(kDim % 64 == 0 && kLatent % (16 * kWarps) == 0, "whole MMA steps and n-tile pairs per warp");
  static_assert(kKeys % 16 == 0 && kScoreWarps <= kWarps && kKeysPerWarp <= 32, "16 keys a score warp");
};

template <int kLatent, int kRope, int kKeys, int kBuffers>
__global__ void __launch_bounds__(kThreads, 2) decode_mma_kernel(
    const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table, int max_blocks_per_seq,
    const int32_t* seq_lens, int heads, float scale, int num_splits, int keys_per_split, bool early_tiles,
    float* partial, __nv_bfloat16* out) {
  using Tile = DecodeTile<kLatent, kRope, kKeys, kBuffers>;
  constexpr int kDim = Tile::kDim, kStride = Tile::kStride, kPieces = Tile::kPieces;
  constexpr int kTilesPerWarp = Tile::kTilesPerWarp, kScoreWarps = Tile::kScoreWarps;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(shared_bytes);            // [16][kStride]
  __nv_bfloat16* kt = qs + kMmaHeads * kStride;                          // [kBuffers][kKeys][kStride]
  __nv_bfloat16* ps = kt + kBuffers * kKeys * kStride;                   // [16][kKeys + kPad]
  auto* row_stat = reinterpret_cast<float*>(ps + kMmaHeads * (kKeys + kPad));  // [kScoreWarps][16]

  const int b = blockIdx.x, split = blockIdx.y, head0 = blockIdx.z * kMmaHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int len = seq_lens[b];
  const int per_split = keys_per_split > 0 ? keys_per_split : (len + num_splits - 1) / num_splits;
  const int begin = split * per_split, end = min(len, begin + per_split);
  const int num_tiles = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  const int32_t* table = block_table + static_cast<int64_t>(b) * max_blocks_per_seq;

  float o[kTilesPerWarp][4] = {};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8

  // Warp w stages keys w, w + 8, ... of tile `tile` with 16-byte asynchronous copies along each entry; keys
  // past the end are zero-filled (their scores are masked below). The warp's lanes look up its keys' cache
  // blocks together first: one block-table latency per tile instead of one per key. (Warp 0 copying whole
  // entries with the copy engine was slower: results/h200/design-measurements.md.)
  auto stage = [&](int tile, int skipped_key = -1) {
    __nv_bfloat16* buffer = kt + (tile % kBuffers) * kKeys * kStride;
    const int first_key = begin + tile * kKeys + warp;
    const int lane_key = first_key + kWarps * lane;
    const int32_t lane_block = lane < Tile::kKeysPerWarp && lane_key < end ? table[lane_key / kMlaBlockSize] : 0;
#pragma unroll
    for (int i = 0; i < Tile::kKeysPerWarp; ++i) {
      const int j = first_key + kWarps * i;
      const bool valid = j < end;
      const int32_t block = __shfl_sync(0xffffffffu, lane_block, i);
      const __nv_bfloat16* src =
          cache + (static_cast<int64_t>(block) * kMlaBlockSize + (valid ? j % kMlaBlockSize : 0)) * kDim;
      __nv_bfloat16* dst = buffer + (warp + kWarps * i) * kStride;
      // The newest entry is left for the plain copy after the wait, but only where it is one of this split's
      // keys: past the split's end (a split before the last) its row must be zero-filled like any key past the
      // end, or the stale shared memory there (NaN, say) reaches the output through P . V despite its zero P.
      if (j == skipped_key && valid) continue;
#pragma unroll
      for (int v = 0; v < (kPieces + 31) / 32; ++v) {
        const int piece = lane + 32 * v;
        if (piece < kPieces) cp_async_16(dst + 8 * piece, src + 8 * piece, valid);
      }
    }
  };
  // early_tiles: the first tiles load before the wait for the previous kernel (launched with launch_dependent).
  // They read only what is complete by the time this kernel starts: the step's block table and lengths, and the
  // cache up to its newest entry (a kernel starts only after the one before it has waited for its own
  // predecessor). The newest entry (key len - 1) and the query come from the kernel just before (mla_prepare,
  // with the absorb in its launch) and are read after the wait.
  constexpr int kPrologue = kBuffers > 1 ? kBuffers - 1 : 1;
  auto stage_prologue = [&](int skipped_key) {
#pragma unroll
    for (int tile = 0; tile < kPrologue; ++tile) {
      if (tile < num_tiles) stage(tile, skipped_key);
      cp_async_commit();
    }
  };
  const int newest = len - 1;
  if (early_tiles) stage_prologue(newest);
  begin_dependent_kernel();
  if (early_tiles && newest >= begin && newest < min(end, begin + kPrologue * kKeys) && warp == 0) {
    // The newest entry, where the prologue skipped it: plain loads (the previous kernel's writes are visible
    // now) into the row the prologue left; the barrier before the tile is read orders them.
    const int row = newest - begin;  // within tile row / kKeys of the prologue
    const int32_t block = table[newest / kMlaBlockSize];
    const auto* src = reinterpret_cast<const uint4*>(
        cache + (static_cast<int64_t>(block) * kMlaBlockSize + newest % kMlaBlockSize) * kDim);
    auto* dst = reinterpret_cast<uint4*>(kt + ((row / kKeys) % kBuffers) * kKeys * kStride + (row % kKeys) * kStride);
    for (int piece = lane; piece < kPieces; piece += 32) dst[piece] = src[piece];
  }
  for (int idx = threadIdx.x; idx < kMmaHeads * kPieces; idx += kThreads) {  // Q in 16-byte pieces
    const int row = idx / kPieces, piece = idx % kPieces;
    uint4 value = {0u, 0u, 0u, 0u};
    if (head0 + row < heads)
      value = reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(b) * heads + head0 + row) * kDim)[piece];
    *reinterpret_cast<uint4*>(qs + row * kStride + 8 * piece) = value;
  }
  if (!early_tiles) stage_prologue(-1);
  const int row16 = (lane & 7) + 8 * ((lane >> 3) & 1), half = 8 * (lane >> 4);  // x4 lane -> (row, column)
  const bool scores = warp < kScoreWarps;
  const int key0 = warp * 16 + 2 * t;  // this lane's first score column; n-tile n adds 8 n
  for (int tile = 0; tile < num_tiles; ++tile) {
    // The buffer refilled here was read in the previous iteration, which every warp has left (last barrier).
    const int next = kBuffers > 1 ? tile + kBuffers - 1 : tile;  // one buffer: refilled once the last tile is read
    if (next >= kPrologue && next < num_tiles) stage(next);
    cp_async_commit();
    cp_async_wait<kBuffers - 1>();
    __syncthreads();  // this tile (every warp's copies) is in shared memory
    const __nv_bfloat16* kv = kt + (tile % kBuffers) * kKeys * kStride;
    const int tile_len = min(kKeys, end - begin - tile * kKeys);

    // S for this score warp's 16 keys (two n-tiles), fragments by ldmatrix, one Q fragment for both; two
    // accumulator chains per n-tile (the MMAs of one chain wait for each other), summed at the end. (8 keys a
    // warp loaded every Q fragment twice as often, and was slower: results/h200/design-measurements.md.)
    float s[2][4];  // [n-tile][fragment]: keys key0 + 8 n + {0, 1} of rows g and g + 8
    if (scores) {
      float chains[2][2][4] = {};  // [chain][n-tile][fragment]
      const __nv_bfloat16* q_lane = qs + row16 * kStride + half;
      const __nv_bfloat16* k_lane = kv + (warp * 16 + (lane & 7) + 8 * (lane >> 4)) * kStride + 8 * ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < kDim; kk += 16) {
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
        for (int i = 0; i < 4; ++i) {
          const float sum = chains[0][n][i] + chains[1][n][i];
          s[n][i] = key0 + 8 * n + (i & 1) < tile_len ? sum * scale : -INFINITY;
        }
      // Row maxima over this warp's keys (the quad), then over the score warps through shared memory.
      float mx[2] = {fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])),
                     fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]))};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      }
      if (t == 0) row_stat[warp * kMmaHeads + g] = mx[0], row_stat[warp * kMmaHeads + g + 8] = mx[1];
    }
    __syncthreads();
    float new_m[2], correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int w = 0; w < kScoreWarps; ++w) tile_max = fmaxf(tile_max, row_stat[w * kMmaHeads + g + 8 * r]);
      new_m[r] = fmaxf(m_run[r], tile_max);
      correction[r] = expf(m_run[r] - new_m[r]);
    }
    __syncthreads();  // row_stat is reused for the sums
    if (scores) {
      float p[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) p[n][i] = expf(s[n][i] - new_m[i / 2]);
      float sum[2] = {(p[0][0] + p[0][1]) + (p[1][0] + p[1][1]), (p[0][2] + p[0][3]) + (p[1][2] + p[1][3])};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      }
      if (t == 0) row_stat[warp * kMmaHeads + g] = sum[0], row_stat[warp * kMmaHeads + g + 8] = sum[1];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        *reinterpret_cast<uint32_t*>(ps + g * (kKeys + kPad) + key0 + 8 * n) = pack_floats(p[n][0], p[n][1]);
        *reinterpret_cast<uint32_t*>(ps + (g + 8) * (kKeys + kPad) + key0 + 8 * n) = pack_floats(p[n][2], p[n][3]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kScoreWarps; ++w) tile_sum += row_stat[w * kMmaHeads + g + 8 * r];
      l_run[r] = l_run[r] * correction[r] + tile_sum;
      m_run[r] = new_m[r];
    }

    // O += P . V over this warp's latent columns.
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
  if (out != nullptr) {  // one split: the output itself, as the combine would write it (o times 1 / l)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = head0 + g + 8 * r;
      if (h >= heads) continue;
      const float weight = 1.0f / l_run[r];
      __nv_bfloat16* o_row = out + (static_cast<int64_t>(b) * heads + h) * kLatent;
#pragma unroll
      for (int j = 0; j < kTilesPerWarp; ++j) {
        const int col = (warp * kTilesPerWarp + j) * 8 + 2 * t;
        *reinterpret_cast<__nv_bfloat162*>(o_row + col) =
            __floats2bfloat162_rn(weight * o[j][2 * r], weight * o[j][2 * r + 1]);
      }
    }
    return;
  }
  // Partials: [latent accumulators | running max | running sum] per (sequence, head, split).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = head0 + g + 8 * r;
    if (h >= heads) continue;
    float* part = partial + ((static_cast<int64_t>(b) * heads + h) * num_splits + split) * (kLatent + 2);
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int col = (warp * kTilesPerWarp + j) * 8 + 2 * t;
      *reinterpret_cast<float2*>(part + col) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
    }
    if (warp == 0 && t == 0) {
      part[kLatent] = m_run[r];
      part[kLatent + 1] = l_run[r];
    }
  }
}

// The weights exp(m_s - max) / total of a (sequence, head)'s splits into weight[] (warp 0), for every thread of the
// block once it returns. parts: the pair's partials, [num_splits][latent + 2].
constexpr int kMaxSplits = kMlaDecodeMaxSplits;
__device__ __forceinline__ void split_weights(const float* parts, int64_t latent, int64_t num_splits, float* weight) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float m = -INFINITY;
    for (int64_t s = lane; s < num_splits; s += 32) m = fmaxf(m, parts[s * (latent + 2) + latent]);
    m = warp_max(m);
    float total = 0.0f;
    for (int64_t s = lane; s < num_splits; s += 32) {
      const float ms = parts[s * (latent + 2) + latent];
      const float w = ms == -INFINITY ? 0.0f : expf(ms - m);  // an empty split (no keys) counts for nothing
      weight[s] = w;
      total += w * parts[s * (latent + 2) + latent + 1];
    }
    total = warp_sum(total);
    for (int64_t s = lane; s < num_splits; s += 32) weight[s] /= total;
  }
  __syncthreads();
}

// Latent columns d and d + 1 of a (sequence, head), summed over its splits. Eight splits' loads are issued before
// their sums (the same order of additions): one load after another cost one memory latency a split.
template <int kInFlight = 8>
__device__ __forceinline__ float2 combine_pair(const float* parts, int64_t latent, int64_t num_splits,
                                               const float* weight, int64_t d) {
  float2 value = {0.0f, 0.0f};
  int64_t s = 0;
  for (; s + kInFlight <= num_splits; s += kInFlight) {
    float2 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) v[j] = *reinterpret_cast<const float2*>(parts + (s + j) * (latent + 2) + d);
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) value.x += weight[s + j] * v[j].x, value.y += weight[s + j] * v[j].y;
  }
  for (; s < num_splits; ++s) {
    const float2 v = *reinterpret_cast<const float2*>(parts + s * (latent + 2) + d);
    value.x += weight[s] * v.x, value.y += weight[s] * v.y;
  }
  return value;
}

// One block per (sequence, head): the splits' weights once, in shared memory; then each latent column sums its
// splits.
__global__ void decode_combine_kernel(const float* partial, int64_t heads, int64_t latent, int64_t num_splits,
                                      __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  __shared__ float weight[kMaxSplits];
  const int64_t b = blockIdx.x, h = blockIdx.y;
  const float* parts = partial + (b * heads + h) * num_splits * (latent + 2);
  split_weights(parts, latent, num_splits, weight);
  __nv_bfloat16* o = out + (b * heads + h) * latent;
  if (latent % 2 != 0) {
    for (int64_t d = threadIdx.x; d < latent; d += blockDim.x) {
      float value = 0.0f;
      for (int64_t s = 0; s < num_splits; ++s) value += weight[s] * parts[s * (latent + 2) + d];
      o[d] = to_bf16(value);
    }
    return;
  }
  for (int64_t d = 2 * threadIdx.x; d < latent; d += 2 * blockDim.x) {
    const float2 value = combine_pair(parts, latent, num_splits, weight, d);
    *reinterpret_cast<__nv_bfloat162*>(o + d) = __floats2bfloat162_rn(value.x, value.y);
  }
}

// The combine with W_uv folded in (the batch-1/2 path): one block per (sequence, head, 32 of the head's output
// rows). The head's latent output is combined into shared memory, rounded to bf16 as the combine kernel stores
// it, then each warp takes 4 rows of W_uv against it. The rows' weights are loaded before the dependency wait
// (nothing this step writes them), so their latency overlaps the attention kernel's end; and the separate
// matrix-vector launch with its own wait is gone.
constexpr int kProjectWarps = 8, kProjectRowsPerWarp = 4;
constexpr int kProjectRows = kProjectWarps * kProjectRowsPerWarp;
// Splits' loads a thread has in flight while combining: 32 (more than the combine kernel's 8) paid at batch 1;
// a 16-load variant spilled registers to the stack (results/h200/design-measurements.md).
constexpr int kProjectInFlight = 32;
__global__ void __launch_bounds__(kProjectWarps * 32)
    decode_combine_project_kernel(const float* partial, int64_t heads, int64_t latent, int64_t num_splits,
                                  LatentProjection projection, __nv_bfloat16* attn) {
  constexpr int kPiecesPerLane = kMmaLatent / 8 / 32;  // 16-byte pieces of a W_uv row a lane holds
  __shared__ float weight[kMaxSplits];
  __shared__ __align__(16) float o[kMmaLatent];
  const int64_t b = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_row = blockIdx.z * kProjectRows + warp * kProjectRowsPerWarp;
  const int pieces = static_cast<int>(latent / 8);
  uint4 w_pieces[kProjectRowsPerWarp][kPiecesPerLane];
#pragma unroll
  for (int r = 0; r < kProjectRowsPerWarp; ++r) {
    const int row = first_row + r;
    const auto* w_row = reinterpret_cast<const uint4*>(projection.w + h * projection.head_stride + row * latent);
#pragma unroll
    for (int p = 0; p < kPiecesPerLane; ++p) {
      const int piece = lane + 32 * p;
      w_pieces[r][p] = row < projection.rows && piece < pieces ? w_row[piece] : uint4{};
    }
  }
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const float* parts = partial + (b * heads + h) * num_splits * (latent + 2);
  split_weights(parts, latent, num_splits, weight);
  for (int64_t d = 2 * threadIdx.x; d < latent; d += 2 * blockDim.x) {
    const float2 value = combine_pair<kProjectInFlight>(parts, latent, num_splits, weight, d);
    o[d] = __bfloat162float(__float2bfloat16(value.x));
    o[d + 1] = __bfloat162float(__float2bfloat16(value.y));
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kProjectRowsPerWarp; ++r) {
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < kPiecesPerLane; ++p) {
      const int piece = lane + 32 * p;
      if (piece >= pieces) continue;
      const auto* w = reinterpret_cast<const __nv_bfloat162*>(&w_pieces[r][p]);
      const float* x = o + 8 * piece;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 wv = __bfloat1622float2(w[j]);
        sum += wv.x * x[2 * j] + wv.y * x[2 * j + 1];
      }
    }
    sum = warp_sum(sum);
    const int row = first_row + r;
    if (lane == 0 && row < projection.rows) attn[(b * heads + h) * projection.rows + row] = to_bf16(sum);
  }
}

// Batches up to this size load their first cache tiles before waiting for the previous kernel (see the kernel):
// it pays at batch 1-2 and is neutral to 4; beyond that the kernel before is cuBLAS's, which does not let this
// one start early, and loading the cache before the query only delays the query.
constexpr int64_t kEarlyTilesMaxBatch = 4;

template <int kKeys, int kBuffers>
void launch_mma(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads, float scale,
                int64_t num_splits, int64_t keys_per_split, float* partial, __nv_bfloat16* out,
                cudaStream_t stream) {
  using Tile = DecodeTile<kMmaLatent, kMmaRope, kKeys, kBuffers>;
  constexpr auto kernel = decode_mma_kernel<kMmaLatent, kMmaRope, kKeys, kBuffers>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tile::kSharedBytes));
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>(num_splits),
                  static_cast<unsigned>((heads + kMmaHeads - 1) / kMmaHeads));
  launch_dependent(kernel, grid, kThreads, Tile::kSharedBytes, stream, q, cache, block_table,
                   static_cast<int>(max_blocks_per_seq), seq_lens, static_cast<int>(heads), scale,
                   static_cast<int>(num_splits), static_cast<int>(keys_per_split), batch <= kEarlyTilesMaxBatch,
                   partial, num_splits == 1 ? out : nullptr);
}

}  // namespace

bool mla_decode_supports(int64_t latent, int64_t rope) {
  return latent <= 32 * kMaxLatentRegs && latent + rope <= 32 * kMaxDimRegs;
}

int64_t mla_decode_splits(int64_t rows, int64_t heads, int64_t latent, int64_t rope, int64_t max_len, int64_t num_sms,
                          MlaDecodeKernel kernel) {
  if (rows == 0) return 1;
  if (kernel != MlaDecodeKernel::kMmaSync && mla_decode_wgmma_supports(heads, latent, rope)) {
    // 64 heads a block, one block an SM (both warpgroup-MMA kernels: 217-222 KB of shared memory): as many splits as
    // fill the SMs once, each at least two 64-key tiles.
    const int64_t blocks = rows * (heads / 64);
    return std::clamp<int64_t>(num_sms / blocks, 1, std::clamp<int64_t>(max_len / 128, 1, 64));
  }
  // The mma.sync kernel, 16 heads a block: enough (sequence, split, head group) blocks for one block per SM, each
  // split at least 32 keys long: at batch 1 a long context is spread over many SMs; at large batch the splits'
  // partials (extra traffic) are avoided (better than four blocks per SM; splits of at least 32 keys better than 64
  // or 16). Two blocks per SM (the kernel's occupancy) where each split still has at least 256 keys (four 64-key
  // tiles), so the second block's share of the traffic outweighs its partials; at shorter splits it did not pay.
  // (Measurements: results/h200/design-measurements.md.)
  const int64_t blocks = rows * ((heads + kMmaHeads - 1) / kMmaHeads);
  const int64_t one_per_sm = (num_sms + blocks - 1) / blocks;
  const int64_t two_per_sm = std::max<int64_t>(1, 2 * num_sms / blocks);  // never fewer than one_per_sm
  const int64_t wanted = max_len / two_per_sm >= 256 ? two_per_sm : one_per_sm;
  return std::clamp<int64_t>(wanted, 1, std::clamp<int64_t>(max_len / 32, 1, 64));
}

size_t mla_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t latent, int64_t num_splits) {
  return static_cast<size_t>(batch * heads * num_splits * (latent + 2)) * sizeof(float);
}

void mla_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                          int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                          int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                          __nv_bfloat16* out, cudaStream_t stream, int64_t keys_per_split, MlaDecodeKernel kernel) {
  if (batch == 0) return;
  // Preconditions (mla_decode_supports): latent <= 512, latent + rope <= 768; every sequence has an entry;
  // 1 <= num_splits <= kMlaDecodeMaxSplits; with keys_per_split, num_splits of them cover every sequence.
  if (!mla_decode_supports(latent, rope) || num_splits < 1 || num_splits > kMlaDecodeMaxSplits) return;
  const bool seesaw = kernel == MlaDecodeKernel::kSeesaw &&
                      mla_decode_seesaw_supports(heads, latent, rope, keys_per_split) &&
                      mla_decode_seesaw(q, cache, block_table, max_blocks_per_seq, seq_lens, batch, heads, scale,
                                        num_splits, keys_per_split, workspace, out, stream);
  if (seesaw) {
    if (num_splits == 1) return;
  } else if (kernel != MlaDecodeKernel::kMmaSync && mla_decode_wgmma_supports(heads, latent, rope)) {
    // 64 heads a block on warpgroup MMAs (mla_decode_wgmma.cuh): each split's entries read once per 64 heads.
    mla_decode_wgmma(q, cache, block_table, max_blocks_per_seq, seq_lens, batch, heads, scale, num_splits,
                     keys_per_split, workspace, out, stream);
    if (num_splits == 1) return;
  } else if (latent == kMmaLatent && rope == kMmaRope) {
    // The tensor-core kernel, built for DeepSeek's 512 + 64, with 32-key tiles in two buffers (the next tile loads
    // while this one computes), faster than one 64-key buffer above batch 4. With one split it writes the output
    // itself: no partials, no combine. (Measurements: results/h200/design-measurements.md.)
    launch_mma<32, 2>(q, cache, block_table, max_blocks_per_seq, seq_lens, batch, heads, scale, num_splits,
                      keys_per_split, workspace, out, stream);
    if (num_splits == 1) return;
  } else {
    const dim3 split_grid(static_cast<unsigned>(batch), static_cast<unsigned>(num_splits),
                          static_cast<unsigned>((heads + kWarps - 1) / kWarps));
    const size_t shared = kTileKeys * (latent + rope) * sizeof(__nv_bfloat16);
    launch_dependent(decode_split_kernel, split_grid, kThreads, shared, stream, q, cache, block_table,
                     max_blocks_per_seq, seq_lens, heads, latent, rope, scale, num_splits, keys_per_split, workspace);
  }
  const dim3 combine_grid(static_cast<unsigned>(batch), static_cast<unsigned>(heads));
  launch_dependent(decode_combine_kernel, combine_grid, 256, 0, stream, workspace, heads, latent, num_splits, out);
}

void mla_decode_attention_projected(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                                    int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                                    int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                                    LatentProjection projection, __nv_bfloat16* attn, cudaStream_t stream) {
  // Preconditions (mla_decode_projected_supports): DeepSeek's 512 + 64, 2 <= num_splits <= kMlaDecodeMaxSplits.
  if (batch == 0 || !mla_decode_projected_supports(latent, rope, num_splits)) return;
  // One 64-key buffer here: 32-key double buffers measured within noise at batch 1 and 2.
  launch_mma<64, 1>(q, cache, block_table, max_blocks_per_seq, seq_lens, batch, heads, scale, num_splits, 0,
                    workspace, nullptr, stream);
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>(heads),
                  static_cast<unsigned>((projection.rows + kProjectRows - 1) / kProjectRows));
  launch_dependent(decode_combine_project_kernel, grid, kProjectWarps * 32, 0, stream, workspace, heads, latent,
                   num_splits, projection, attn);
}

bool mla_decode_projected_supports(int64_t latent, int64_t rope, int64_t num_splits) {
  return latent == kMmaLatent && rope == kMmaRope && num_splits >= 2 && num_splits <= kMaxSplits;
}

}  // namespace deepinfer::cuda
