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

}  // namespace

std::vector<int32_t> mla_prefill_tiles(const std::vector<int32_t>& q_seq) {
  std::vector<int32_t> tiles;
  for (size_t r = 0; r < q_seq.size(); ++r)
    if (tiles.empty() || q_seq[r] != q_seq[r - 1] || static_cast<int64_t>(r) - tiles.back() == kWarps)
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
  const size_t shared = kTileKeys * (nope + v_dim + rope) * sizeof(__nv_bfloat16);
  prefill_kernel<<<grid, kThreads, shared, stream>>>(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, tiles, heads, nope,
                                                     rope, v_dim, scale, out);
}

}  // namespace deepinfer::cuda
