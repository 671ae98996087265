#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sparse_attention.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;  // heads a block
constexpr int kRegs = static_cast<int>(kSparseMaxHeadDim / 32);
constexpr int64_t kBlockTokens = 64;

__global__ void __launch_bounds__(kWarps * 32) sparse_window_kernel(const __nv_bfloat16* q, SparseWindowKeys k,
                                                                     const float* sinks, int64_t heads,
                                                                     int64_t head_dim, float scale,
                                                                     __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x, h = blockIdx.y * kWarps + warp;
  if (h >= heads) return;
  WarpOnlineAttention<kRegs, kRegs> attn;
  attn.start(q + (r * heads + h) * head_dim, head_dim, lane, true);
  // The sink: exp(sink) in the denominator from the start, no value.
  attn.running_max = sinks[h];
  attn.running_sum = 1.0f;
  const int64_t p = k.positions[r];
  for (int64_t j = p - k.window + 1 < 0 ? 0 : p - k.window + 1; j <= p; ++j) {
    const int64_t block = k.block_table[r * k.max_blocks + j / kBlockTokens];
    const __nv_bfloat16* key = k.cache + (block * kBlockTokens + j % kBlockTokens) * k.entry_stride;
    attn.add(attn.dot(key, head_dim, lane, head_dim, 0) * scale, key, head_dim, lane);
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

}  // namespace

void sparse_window_attention(const __nv_bfloat16* q, const SparseWindowKeys& keys, const float* sinks, int64_t rows,
                             int64_t heads, int64_t head_dim, float scale, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows == 0 || head_dim > kSparseMaxHeadDim) return;  // the model checks head_dim
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((heads + kWarps - 1) / kWarps));
  launch_dependent(sparse_window_kernel, grid, kWarps * 32, 0, stream, q, keys, sinks, heads, head_dim, scale, out);
}

}  // namespace deepinfer::cuda
