#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_prefill.cuh"

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

  float q_reg[kMaxQkRegs], acc[kMaxVRegs];
#pragma unroll
  for (int i = 0; i < kMaxQkRegs; ++i) {
    const int64_t d = lane + 32 * i;
    q_reg[i] = active && d < qk ? to_float(q[(r * heads + h) * qk + d]) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kMaxVRegs; ++i) acc[i] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

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
      const __nv_bfloat16* k = keys + t * width;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxQkRegs; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < nope) dot += q_reg[i] * to_float(k[d]);
        else if (d < qk) dot += q_reg[i] * to_float(k[v_dim + d]);  // k_pe sits after v
      }
      const float score = warp_sum(dot) * scale;
      const float new_max = fmaxf(running_max, score);
      const float correction = expf(running_max - new_max);
      const float p = expf(score - new_max);
      running_sum = running_sum * correction + p;
#pragma unroll
      for (int i = 0; i < kMaxVRegs; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < v_dim) acc[i] = acc[i] * correction + p * to_float(k[nope + d]);
      }
      running_max = new_max;
    }
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kMaxVRegs; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < v_dim) out[(r * heads + h) * v_dim + d] = to_bf16(acc[i] / running_sum);
  }
}

// Tensor-core form: one block per (tile of up to 16 rows of one sequence, head). Per 64-key tile staged in shared
// memory as [k_nope | k_pe] and [v]: S[16 rows, 64 keys] = Q K^T with m16n8k16 bf16 MMAs (warp w: keys
// [8w, 8w + 8)), causal masking per row, an online softmax combined across warps in shared memory, then
// O[16, v] += P V (warp w: columns [w * v / 8, ...)).
constexpr int kMmaRows = 16;
constexpr int kMmaKeys = 64;
constexpr int kPad = 8;

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack_pair(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

template <int kTilesPerWarp>  // v_dim / 64 output n-tiles of 8 columns per warp
__global__ void __launch_bounds__(kThreads) prefill_mma_kernel(
    const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe, int64_t k_pe_stride,
    const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, const int32_t* tiles, int64_t heads, int64_t nope,
    int64_t rope, int64_t v_dim, float scale, __nv_bfloat16* out) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int64_t qk = nope + rope, qk_stride = qk + kPad, v_stride = v_dim + kPad;
  auto* qs = reinterpret_cast<__nv_bfloat16*>(shared_bytes);  // [16][qk_stride]
  __nv_bfloat16* ks = qs + kMmaRows * qk_stride;              // [64][qk_stride]: k_nope | k_pe
  __nv_bfloat16* vs = ks + kMmaKeys * qk_stride;              // [64][v_stride]
  __nv_bfloat16* ps = vs + kMmaKeys * v_stride;               // [16][64 + kPad]
  auto* row_stat = reinterpret_cast<float*>(ps + kMmaRows * (kMmaKeys + kPad));  // [8][16]

  const int64_t h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t row_begin = tiles[blockIdx.x], row_end = tiles[blockIdx.x + 1];
  const int64_t key_begin = cu_k[q_seq[row_begin]];
  const int64_t tile_keys = q_pos[row_end - 1] + 1;
  // Positions of this lane's two rows (-1 for rows past the tile: their scores stay finite and are discarded).
  int64_t pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) pos[r] = row_begin + g + 8 * r < row_end ? q_pos[row_begin + g + 8 * r] : -1;

  for (int64_t idx = threadIdx.x; idx < kMmaRows * qk; idx += kThreads) {
    const int64_t row = idx / qk, col = idx % qk;
    qs[row * qk_stride + col] = row_begin + row < row_end ? q[((row_begin + row) * heads + h) * qk + col] : __float2bfloat16(0.0f);
  }
  float o[kTilesPerWarp][4] = {};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int64_t base = 0; base < tile_keys; base += kMmaKeys) {
    const int64_t count = min(static_cast<int64_t>(kMmaKeys), tile_keys - base);
    __syncthreads();
    for (int64_t key = warp; key < kMmaKeys; key += kWarps) {
      __nv_bfloat16* kdst = ks + key * qk_stride;
      __nv_bfloat16* vdst = vs + key * v_stride;
      if (key < count) {
        const int64_t src_key = key_begin + base + key;
        const __nv_bfloat16* src = kv + (src_key * heads + h) * (nope + v_dim);
        for (int64_t i = lane; i < nope / 8; i += 32) reinterpret_cast<uint4*>(kdst)[i] = reinterpret_cast<const uint4*>(src)[i];
        for (int64_t i = lane; i < rope / 8; i += 32)
          reinterpret_cast<uint4*>(kdst + nope)[i] = reinterpret_cast<const uint4*>(k_pe + src_key * k_pe_stride)[i];
        for (int64_t i = lane; i < v_dim / 8; i += 32) reinterpret_cast<uint4*>(vdst)[i] = reinterpret_cast<const uint4*>(src + nope)[i];
      } else {
        for (int64_t i = lane; i < qk / 8; i += 32) reinterpret_cast<uint4*>(kdst)[i] = make_uint4(0, 0, 0, 0);
        for (int64_t i = lane; i < v_dim / 8; i += 32) reinterpret_cast<uint4*>(vdst)[i] = make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();

    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const __nv_bfloat16* krow = ks + (warp * 8 + g) * qk_stride;
    for (int64_t kk = 0; kk < qk; kk += 16) {
      mma_bf16(s, load_pair(qs + g * qk_stride + kk + 2 * t), load_pair(qs + (g + 8) * qk_stride + kk + 2 * t),
               load_pair(qs + g * qk_stride + kk + 2 * t + 8), load_pair(qs + (g + 8) * qk_stride + kk + 2 * t + 8),
               load_pair(krow + kk + 2 * t), load_pair(krow + kk + 2 * t + 8));
    }
    const int64_t key0 = base + warp * 8 + 2 * t;  // key index within the sequence
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t key = key0 + (i & 1), p_row = pos[i / 2];
      s[i] = p_row < 0 ? 0.0f : (key <= p_row && key < tile_keys ? s[i] * scale : -INFINITY);
    }
    float mx[2] = {fmaxf(s[0], s[1]), fmaxf(s[2], s[3])};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (t == 0) row_stat[warp * kMmaRows + g] = mx[0], row_stat[warp * kMmaRows + g + 8] = mx[1];
    __syncthreads();
    float new_m[2], correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
      for (int w = 0; w < kWarps; ++w) tile_max = fmaxf(tile_max, row_stat[w * kMmaRows + g + 8 * r]);
      new_m[r] = fmaxf(m_run[r], tile_max);
      // A row with no visible key in this tile (all -inf) keeps its state: correction 1, p 0.
      correction[r] = new_m[r] == -INFINITY ? 1.0f : expf(m_run[r] - new_m[r]);
    }
    __syncthreads();
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = new_m[i / 2] == -INFINITY ? 0.0f : expf(s[i] - new_m[i / 2]);
    float sum[2] = {p[0] + p[1], p[2] + p[3]};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    if (t == 0) row_stat[warp * kMmaRows + g] = sum[0], row_stat[warp * kMmaRows + g + 8] = sum[1];
    const int64_t pcol = warp * 8 + 2 * t;
    ps[g * (kMmaKeys + kPad) + pcol] = __float2bfloat16(p[0]);
    ps[g * (kMmaKeys + kPad) + pcol + 1] = __float2bfloat16(p[1]);
    ps[(g + 8) * (kMmaKeys + kPad) + pcol] = __float2bfloat16(p[2]);
    ps[(g + 8) * (kMmaKeys + kPad) + pcol + 1] = __float2bfloat16(p[3]);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) tile_sum += row_stat[w * kMmaRows + g + 8 * r];
      l_run[r] = l_run[r] * correction[r] + tile_sum;
      m_run[r] = new_m[r];
    }
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      o[j][0] *= correction[0];
      o[j][1] *= correction[0];
      o[j][2] *= correction[1];
      o[j][3] *= correction[1];
    }
    const __nv_bfloat16* prow = ps + g * (kMmaKeys + kPad);
    const __nv_bfloat16* prow8 = ps + (g + 8) * (kMmaKeys + kPad);
#pragma unroll
    for (int kk = 0; kk < kMmaKeys; kk += 16) {
      const uint32_t a0 = load_pair(prow + kk + 2 * t), a1 = load_pair(prow8 + kk + 2 * t);
      const uint32_t a2 = load_pair(prow + kk + 2 * t + 8), a3 = load_pair(prow8 + kk + 2 * t + 8);
      const __nv_bfloat16* v0 = vs + (kk + 2 * t) * v_stride;
#pragma unroll
      for (int j = 0; j < kTilesPerWarp; ++j) {
        const int64_t col = (warp * kTilesPerWarp + j) * 8 + g;
        mma_bf16(o[j], a0, a1, a2, a3, pack_pair(v0[col], v0[v_stride + col]),
                 pack_pair(v0[8 * v_stride + col], v0[9 * v_stride + col]));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row_begin + g + 8 * r;
    if (row >= row_end) continue;
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int64_t col = (warp * kTilesPerWarp + j) * 8 + 2 * t;
      out[(row * heads + h) * v_dim + col] = to_bf16(o[j][2 * r] / l_run[r]);
      out[(row * heads + h) * v_dim + col + 1] = to_bf16(o[j][2 * r + 1] / l_run[r]);
    }
  }
}

}  // namespace

bool mla_prefill_uses_mma(int64_t nope, int64_t rope, int64_t v_dim) {
  return v_dim == 128 && (nope + rope) % 16 == 0 && nope % 8 == 0 && rope % 8 == 0;
}

std::vector<int32_t> mla_prefill_tiles(const std::vector<int32_t>& q_seq, int64_t nope, int64_t rope, int64_t v_dim) {
  const int64_t rows_per_tile = mla_prefill_uses_mma(nope, rope, v_dim) ? kMmaRows : kWarps;
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

void mla_prefill_attention(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                           int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k,
                           const int32_t* tiles, int64_t num_tiles, int64_t heads, int64_t nope, int64_t rope,
                           int64_t v_dim, float scale, __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tiles == 0 || !mla_prefill_supports(nope, rope, v_dim)) return;
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(heads));
  if (mla_prefill_uses_mma(nope, rope, v_dim)) {
    const size_t shared = ((kMmaRows + kMmaKeys) * (nope + rope + kPad) + kMmaKeys * (v_dim + kPad) +
                           kMmaRows * (kMmaKeys + kPad)) * sizeof(__nv_bfloat16) + kWarps * kMmaRows * sizeof(float);
    cudaFuncSetAttribute(prefill_mma_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    prefill_mma_kernel<2><<<grid, kThreads, shared, stream>>>(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles, heads,
                                                              nope, rope, v_dim, scale, out);
    return;
  }
  const size_t shared = kTileKeys * (nope + v_dim + rope) * sizeof(__nv_bfloat16);
  prefill_kernel<<<grid, kThreads, shared, stream>>>(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles, heads, nope,
                                                     rope, v_dim, scale, out);
}

}  // namespace deepinfer::cuda
