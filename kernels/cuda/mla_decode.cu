#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_decode.cuh"
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
                                    int64_t latent, int64_t rope, float scale, int64_t num_splits, float* partial) {
  extern __shared__ __nv_bfloat16 tile[];  // [kTileKeys][dim]
  const int64_t b = blockIdx.x, split = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t h = blockIdx.z * kWarps + warp;
  const bool active = h < heads;
  const int64_t dim = latent + rope;
  const int64_t len = seq_lens[b];
  const int64_t per_split = (len + num_splits - 1) / num_splits;
  const int64_t begin = split * per_split, end = min(len, begin + per_split);

  float q_reg[kMaxDimRegs];
  float acc[kMaxLatentRegs];
#pragma unroll
  for (int i = 0; i < kMaxDimRegs; ++i) {
    const int64_t d = lane + 32 * i;
    q_reg[i] = active && d < dim ? to_float(q[(b * heads + h) * dim + d]) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kMaxLatentRegs; ++i) acc[i] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

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
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxDimRegs; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < dim) dot += q_reg[i] * to_float(entry[d]);
      }
      const float score = warp_sum(dot) * scale;
      const float new_max = fmaxf(running_max, score);
      const float correction = expf(running_max - new_max);
      const float p = expf(score - new_max);
      running_sum = running_sum * correction + p;
#pragma unroll
      for (int i = 0; i < kMaxLatentRegs; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < latent) acc[i] = acc[i] * correction + p * to_float(entry[d]);
      }
      running_max = new_max;
    }
  }
  if (!active) return;
  float* out = partial + ((b * heads + h) * num_splits + split) * (latent + 2);
#pragma unroll
  for (int i = 0; i < kMaxLatentRegs; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < latent) out[d] = acc[i];
  }
  if (lane == 0) {
    out[latent] = running_max;
    out[latent + 1] = running_sum;
  }
}

// Tensor-core form (FlashMLA's shape, on mma.sync): one block per (sequence, KV split, group of 16 heads).
// Tiles of 64 cache entries are staged in shared memory by cp.async, one buffer: two blocks fit on an SM, and
// measured at batch 256 that beat a double-buffered tile with one block per SM (21.0 against 22.5 ms a step).
// Per tile: S[16 heads, 64 keys] = Q . K^T with m16n8k16 bf16 MMAs (warp w takes
// keys [8w, 8w + 8)), an online softmax whose row statistics the 8 warps combine through shared memory, then
// O[16, latent] += P . V with the same MMAs (warp w takes latent columns [w * latent / 8, ...)).
constexpr int kMmaHeads = 16;
constexpr int kMmaKeys = 64;
constexpr int kPad = 8;  // bf16 elements of padding per shared row: consecutive rows start 4 banks apart

template <int kTilesPerWarp>  // latent / 64 output n-tiles of 8 columns per warp
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(
    const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table, int64_t max_blocks_per_seq,
    const int32_t* seq_lens, int64_t heads, int64_t latent, int64_t rope, float scale, int64_t num_splits,
    float* partial) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int64_t dim = latent + rope, stride = dim + kPad;
  auto* qs = reinterpret_cast<__nv_bfloat16*>(shared_bytes);           // [16][stride]
  __nv_bfloat16* kt = qs + kMmaHeads * stride;                          // [64][stride]
  __nv_bfloat16* ps = kt + kMmaKeys * stride;                           // [16][64 + kPad]
  auto* row_stat = reinterpret_cast<float*>(ps + kMmaHeads * (kMmaKeys + kPad));  // [8 warps][16]

  const int64_t b = blockIdx.x, split = blockIdx.y, head0 = static_cast<int64_t>(blockIdx.z) * kMmaHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t len = seq_lens[b];
  const int64_t per_split = (len + num_splits - 1) / num_splits;
  const int64_t begin = split * per_split, end = min(len, begin + per_split);

  for (int64_t idx = threadIdx.x; idx < kMmaHeads * dim; idx += kThreads) {
    const int64_t row = idx / dim, col = idx % dim;
    qs[row * stride + col] = head0 + row < heads ? q[((b * heads) + head0 + row) * dim + col] : __float2bfloat16(0.0f);
  }
  float o[kTilesPerWarp][4] = {};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8

  // Warp w stages keys w, w + 8, ... of a tile: one block-table lookup per key, 16-byte asynchronous copies
  // along the entry; keys past the end are zero-filled (their scores are masked below).
  auto stage = [&](int64_t tile_begin, __nv_bfloat16* buffer) {
    for (int64_t key = warp; key < kMmaKeys; key += kWarps) {
      const int64_t j = tile_begin + key;
      const bool valid = j < end;
      const int64_t block = valid ? block_table[b * max_blocks_per_seq + j / kMlaBlockSize] : 0;
      const __nv_bfloat16* src = cache + (block * kMlaBlockSize + (valid ? j % kMlaBlockSize : 0)) * dim;
      for (int64_t v = lane; v < dim / 8; v += 32) cp_async_16(buffer + key * stride + 8 * v, src + 8 * v, valid);
    }
    cp_async_commit();
  };
  for (int64_t tile_begin = begin; tile_begin < end; tile_begin += kMmaKeys) {
    const int64_t tile_len = min(static_cast<int64_t>(kMmaKeys), end - tile_begin);
    stage(tile_begin, kt);
    cp_async_wait<0>();
    __syncthreads();  // this tile (every warp's copies) is in shared memory

    // S for this warp's 8 keys, fragments by ldmatrix; four independent accumulator chains (the MMAs of one
    // chain wait for each other), summed at the end.
    float s4[4][4] = {};
    const int row16 = (lane & 7) + 8 * ((lane >> 3) & 1), half = 8 * (lane >> 4);  // x4 lane -> (row, column)
    const __nv_bfloat16* q_lane = qs + row16 * stride + half;
    const __nv_bfloat16* k_lane = kt + (warp * 8 + (lane & 7)) * stride + 8 * ((lane >> 3) & 1);
    for (int64_t kk = 0; kk < dim; kk += 64) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (kk + 16 * c >= dim) break;
        uint32_t a[4], bk[2];
        ldmatrix_x4(a, q_lane + kk + 16 * c);
        ldmatrix_x2(bk, k_lane + kk + 16 * c);
        mma_bf16(s4[c], a[0], a[1], a[2], a[3], bk[0], bk[1]);
      }
    }
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = (s4[0][i] + s4[1][i]) + (s4[2][i] + s4[3][i]);
    const int64_t key0 = warp * 8 + 2 * t;
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = key0 + (i & 1) < tile_len ? s[i] * scale : -INFINITY;

    // Row maxima over the 64 keys: the quad, then the 8 warps.
    float mx[2] = {fmaxf(s[0], s[1]), fmaxf(s[2], s[3])};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (t == 0) row_stat[warp * kMmaHeads + g] = mx[0], row_stat[warp * kMmaHeads + g + 8] = mx[1];
    __syncthreads();
    float new_m[2], correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
      for (int w = 0; w < kWarps; ++w) tile_max = fmaxf(tile_max, row_stat[w * kMmaHeads + g + 8 * r]);
      new_m[r] = fmaxf(m_run[r], tile_max);
      correction[r] = expf(m_run[r] - new_m[r]);
    }
    __syncthreads();  // row_stat is reused for the sums
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = expf(s[i] - new_m[i / 2]);
    float sum[2] = {p[0] + p[1], p[2] + p[3]};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    if (t == 0) row_stat[warp * kMmaHeads + g] = sum[0], row_stat[warp * kMmaHeads + g + 8] = sum[1];
    ps[g * (kMmaKeys + kPad) + key0] = __float2bfloat16(p[0]);
    ps[g * (kMmaKeys + kPad) + key0 + 1] = __float2bfloat16(p[1]);
    ps[(g + 8) * (kMmaKeys + kPad) + key0] = __float2bfloat16(p[2]);
    ps[(g + 8) * (kMmaKeys + kPad) + key0 + 1] = __float2bfloat16(p[3]);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) tile_sum += row_stat[w * kMmaHeads + g + 8 * r];
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
    const __nv_bfloat16* p_lane = ps + row16 * (kMmaKeys + kPad) + half;
#pragma unroll
    for (int kk = 0; kk < kMmaKeys; kk += 16) {
      uint32_t a[4];
      ldmatrix_x4(a, p_lane + kk);
      const __nv_bfloat16* v_lane = kt + (kk + row16) * stride + warp * kTilesPerWarp * 8 + half;
#pragma unroll
      for (int j = 0; j < kTilesPerWarp; j += 2) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, v_lane + j * 8);
        mma_bf16(o[j], a[0], a[1], a[2], a[3], bv[0], bv[1]);
        mma_bf16(o[j + 1], a[0], a[1], a[2], a[3], bv[2], bv[3]);
      }
    }
    __syncthreads();  // every warp is done with this tile before the next one is staged over it
  }
  // Partials: [latent accumulators | running max | running sum] per (sequence, head, split).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t h = head0 + g + 8 * r;
    if (h >= heads) continue;
    float* out = partial + ((b * heads + h) * num_splits + split) * (latent + 2);
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int64_t col = (warp * kTilesPerWarp + j) * 8 + 2 * t;
      out[col] = o[j][2 * r];
      out[col + 1] = o[j][2 * r + 1];
    }
    if (warp == 0 && t == 0) {
      out[latent] = m_run[r];
      out[latent + 1] = l_run[r];
    }
  }
}

// One block per (sequence, head): the splits' weights exp(m_s - max) / total once, in shared memory; then each
// latent column sums its splits.
__global__ void decode_combine_kernel(const float* partial, int64_t heads, int64_t latent, int64_t num_splits,
                                      __nv_bfloat16* out) {
  constexpr int kMaxSplits = 64;
  __shared__ float weight[kMaxSplits];
  const int64_t b = blockIdx.x, h = blockIdx.y;
  const float* parts = partial + (b * heads + h) * num_splits * (latent + 2);
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
  for (int64_t d = threadIdx.x; d < latent; d += blockDim.x) {
    float value = 0.0f;
    for (int64_t s = 0; s < num_splits; ++s) value += weight[s] * parts[s * (latent + 2) + d];
    out[(b * heads + h) * latent + d] = to_bf16(value);
  }
}

}  // namespace

bool mla_decode_supports(int64_t latent, int64_t rope) {
  return latent <= 32 * kMaxLatentRegs && latent + rope <= 32 * kMaxDimRegs;
}

size_t mla_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t latent, int64_t num_splits) {
  return static_cast<size_t>(batch * heads * num_splits * (latent + 2)) * sizeof(float);
}

void mla_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* cache, const int32_t* block_table,
                          int64_t max_blocks_per_seq, const int32_t* seq_lens, int64_t batch, int64_t heads,
                          int64_t latent, int64_t rope, float scale, int64_t num_splits, float* workspace,
                          __nv_bfloat16* out, cudaStream_t stream) {
  if (batch == 0) return;
  // Preconditions (mla_decode_supports): latent <= 512, latent + rope <= 768; every sequence has an entry;
  // 1 <= num_splits <= 64.
  if (!mla_decode_supports(latent, rope) || num_splits < 1 || num_splits > 64) return;
  if (latent == 512 && (latent + rope) % 16 == 0) {
    // The tensor-core kernel (DeepSeek's 512 + 64 and any rope width that keeps 16-element MMA steps).
    const size_t shared = (kMmaHeads + kMmaKeys) * (latent + rope + kPad) * sizeof(__nv_bfloat16) +
                          kMmaHeads * (kMmaKeys + kPad) * sizeof(__nv_bfloat16) + kWarps * kMmaHeads * sizeof(float);
    cudaFuncSetAttribute(decode_mma_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>(num_splits),
                    static_cast<unsigned>((heads + kMmaHeads - 1) / kMmaHeads));
    decode_mma_kernel<8><<<grid, kThreads, shared, stream>>>(q, cache, block_table, max_blocks_per_seq, seq_lens, heads,
                                                             latent, rope, scale, num_splits, workspace);
  } else {
    const dim3 split_grid(static_cast<unsigned>(batch), static_cast<unsigned>(num_splits),
                          static_cast<unsigned>((heads + kWarps - 1) / kWarps));
    const size_t shared = kTileKeys * (latent + rope) * sizeof(__nv_bfloat16);
    decode_split_kernel<<<split_grid, kThreads, shared, stream>>>(q, cache, block_table, max_blocks_per_seq, seq_lens,
                                                                  heads, latent, rope, scale, num_splits, workspace);
  }
  const dim3 combine_grid(static_cast<unsigned>(batch), static_cast<unsigned>(heads));
  decode_combine_kernel<<<combine_grid, 128, 0, stream>>>(workspace, heads, latent, num_splits, out);
}

}  // namespace deepinfer::cuda
