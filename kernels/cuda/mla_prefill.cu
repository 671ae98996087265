#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mla_prefill.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 128;

// One block per (query row, head); threads split the channels. Correct and simple; the fast kernel is the
// performance issue's.
__global__ void prefill_kernel(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                               int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, int64_t heads,
                               int64_t nope, int64_t rope, int64_t v_dim, float scale, __nv_bfloat16* out) {
  const int64_t r = blockIdx.x, h = blockIdx.y;
  const int64_t key_begin = cu_k[q_seq[r]];
  const int64_t visible = q_pos[r] + 1;
  const __nv_bfloat16* qh = q + (r * heads + h) * (nope + rope);
  float acc[4] = {};  // v_dim <= 4 * kThreads
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t j = 0; j < visible; ++j) {
    const int64_t key = key_begin + j;
    const __nv_bfloat16* kvh = kv + (key * heads + h) * (nope + v_dim);
    float dot = 0.0f;
    for (int64_t d = threadIdx.x; d < nope; d += kThreads) dot += to_float(qh[d]) * to_float(kvh[d]);
    for (int64_t d = threadIdx.x; d < rope; d += kThreads) dot += to_float(qh[nope + d]) * to_float(k_pe[key * k_pe_stride + d]);
    const float score = block_sum(dot) * scale;
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
    int i = 0;
    for (int64_t d = threadIdx.x; d < v_dim; d += kThreads, ++i)
      acc[i] = acc[i] * correction + p * to_float(kvh[nope + d]);
    running_max = new_max;
  }
  int i = 0;
  for (int64_t d = threadIdx.x; d < v_dim; d += kThreads) out[(r * heads + h) * v_dim + d] = to_bf16(acc[i++] / running_sum);
}

}  // namespace

void mla_prefill_attention(const __nv_bfloat16* q, const __nv_bfloat16* kv, const __nv_bfloat16* k_pe,
                           int64_t k_pe_stride, const int32_t* q_seq, const int32_t* q_pos, const int32_t* cu_k, int64_t num_q_rows,
                           int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, float scale, __nv_bfloat16* out,
                           cudaStream_t stream) {
  if (num_q_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(num_q_rows), static_cast<unsigned>(heads));
  prefill_kernel<<<grid, kThreads, 0, stream>>>(q, kv, k_pe, k_pe_stride, q_seq, q_pos, cu_k, heads, nope, rope, v_dim, scale, out);
}

}  // namespace deepinfer::cuda
