#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hyper_connections.cuh"
#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) hc_embed_kernel(const __nv_bfloat16* table, const int32_t* ids, int hc,
                                                            int64_t hidden, float* streams, float* pre) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;  // tokens in grid.x: grid.y stops at 65,535
  const int64_t i = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (blockIdx.y == 0 && threadIdx.x < hc) pre[t * hc + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
  if (i >= hidden) return;
  const float v = to_float(table[static_cast<int64_t>(ids[t]) * hidden + i]);
  for (int j = 0; j < hc; ++j) streams[(t * hc + j) * hidden + i] = v;
}

__global__ void __launch_bounds__(kThreads) hc_flat_rms_norm_kernel(const float* streams, int64_t d, float eps,
                                                                    __nv_bfloat16* flat) {
  begin_dependent_kernel();
  const float* x = streams + blockIdx.x * d;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += kThreads) sum_sq += x[i] * x[i];
  const float inv = 1.0f / sqrtf(block_sum(sum_sq) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += kThreads) flat[blockIdx.x * d + i] = to_bf16(x[i] * inv);
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void hc_mixes_kernel(const float* mixes, const float* base, const float* scale, int64_t tokens, int hc,
                                float hc_eps, int64_t sinkhorn_iters, float* pre, float* post, float* comb) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const float* m = mixes + t * (2 + hc) * hc;
  for (int j = 0; j < hc; ++j) {
    pre[t * hc + j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps;
    post[t * hc + j] = 2.0f * sigmoid(m[hc + j] * scale[1] + base[hc + j]);
  }
  float c[kHcMaxStreams * kHcMaxStreams];  // c[j * hc + k]: from stream j into stream k
  for (int j = 0; j < hc; ++j) {  // row softmax, + eps
    float max = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      c[j * hc + k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
      max = fmaxf(max, c[j * hc + k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < hc; ++k) sum += c[j * hc + k] = expf(c[j * hc + k] - max);
    for (int k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / sum + hc_eps;
  }
  const int64_t rounds = sinkhorn_iters > 1 ? sinkhorn_iters : 1;  // the first columns pass always runs
  for (int64_t it = 0; it < rounds; ++it) {
    if (it > 0) {
      for (int j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int k = 0; k < hc; ++k) sum += c[j * hc + k];
        for (int k = 0; k < hc; ++k) c[j * hc + k] /= sum + hc_eps;
      }
    }
    for (int k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < hc; ++j) sum += c[j * hc + k];
      for (int j = 0; j < hc; ++j) c[j * hc + k] /= sum + hc_eps;
    }
  }
  for (int i = 0; i < hc * hc; ++i) comb[t * hc * hc + i] = c[i];
}

__global__ void __launch_bounds__(kThreads) hc_collapse_rms_norm_kernel(const float* streams, const float* pre,
                                                                        const __nv_bfloat16* weight, int hc,
                                                                        int64_t hidden, float eps, __nv_bfloat16* h) {
  begin_dependent_kernel();
  extern __shared__ float collapsed[];  // [hidden]
  const int64_t t = blockIdx.x;
  const float* s = streams + t * hc * hidden;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    float v = 0.0f;
    for (int j = 0; j < hc; ++j) v += pre[t * hc + j] * s[j * hidden + i];
    collapsed[i] = v;
    sum_sq += v * v;
  }
  const float inv = rsqrtf(block_sum(sum_sq) / static_cast<float>(hidden) + eps);
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads)
    h[t * hidden + i] = to_bf16(to_float(weight[i]) * (collapsed[i] * inv));
}

__global__ void __launch_bounds__(kThreads) hc_collapse_kernel(const float* streams, const float* pre, int hc,
                                                               int64_t hidden, __nv_bfloat16* out,
                                                               int64_t out_stride) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;
  const int64_t i = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= hidden) return;
  const float* s = streams + t * hc * hidden;
  float v = 0.0f;
  for (int j = 0; j < hc; ++j) v += (pre != nullptr ? pre[t * hc + j] : 1.0f / static_cast<float>(hc)) * s[j * hidden + i];
  out[t * out_stride + i] = to_bf16(v);
}

__global__ void hc_head_weights_kernel(const float* mixes, const float* base, const float* scale, int64_t count, int hc,
                                       float hc_eps, float* pre) {
  begin_dependent_kernel();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  pre[i] = 1.0f / (1.0f + expf(-(mixes[i] * scale[0] + base[i % hc]))) + hc_eps;
}

__global__ void __launch_bounds__(kThreads) hc_post_kernel(float* streams, const __nv_bfloat16* out, const float* post,
                                                           const float* comb, int hc, int64_t hidden) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;  // tokens in grid.x: grid.y stops at 65,535
  const int64_t i = blockIdx.y * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= hidden) return;
  float* s = streams + t * hc * hidden;
  float old[kHcMaxStreams];
  for (int j = 0; j < hc; ++j) old[j] = s[j * hidden + i];
  const float o = to_float(out[t * hidden + i]);
  const float* c = comb + t * hc * hc;
  for (int k = 0; k < hc; ++k) {
    float v = 0.0f;
    for (int j = 0; j < hc; ++j) v += c[j * hc + k] * old[j];
    s[k * hidden + i] = v + post[t * hc + k] * o;
  }
}

}  // namespace

void hc_flat_rms_norm(const float* streams, int64_t tokens, int64_t d, float eps, __nv_bfloat16* flat,
                      cudaStream_t stream) {
  if (tokens == 0) return;
  launch_dependent(hc_flat_rms_norm_kernel, static_cast<unsigned>(tokens), kThreads, 0, stream, streams, d, eps, flat);
}

void hc_mixes(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc, float hc_eps,
              int64_t sinkhorn_iters, float* pre, float* post, float* comb, cudaStream_t stream) {
  if (tokens == 0 || hc > kHcMaxStreams) return;  // the model checks hc
  constexpr int kPerBlock = 64;
  launch_dependent(hc_mixes_kernel, static_cast<unsigned>((tokens + kPerBlock - 1) / kPerBlock), kPerBlock, 0, stream,
                   mixes, base, scale, tokens, static_cast<int>(hc), hc_eps, sinkhorn_iters, pre, post, comb);
}

void hc_collapse_rms_norm(const float* streams, const float* pre, const __nv_bfloat16* weight, int64_t tokens,
                          int64_t hc, int64_t hidden, float eps, __nv_bfloat16* h, cudaStream_t stream) {
  if (tokens == 0 || hidden > kHcMaxHidden || hc > kHcMaxStreams) return;  // the model checks both
  launch_dependent(hc_collapse_rms_norm_kernel, static_cast<unsigned>(tokens), kThreads, hidden * sizeof(float),
                   stream, streams, pre, weight, static_cast<int>(hc), hidden, eps, h);
}

void hc_collapse(const float* streams, const float* pre, int64_t tokens, int64_t hc, int64_t hidden,
                 __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream) {
  if (tokens == 0 || hc > kHcMaxStreams) return;  // the model checks hc
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  launch_dependent(hc_collapse_kernel, grid, kThreads, 0, stream, streams, pre, static_cast<int>(hc), hidden, out,
                   out_stride);
}

void hc_head_weights(const float* mixes, const float* base, const float* scale, int64_t tokens, int64_t hc,
                     float hc_eps, float* pre, cudaStream_t stream) {
  const int64_t count = tokens * hc;
  if (count == 0) return;
  launch_dependent(hc_head_weights_kernel, static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0,
                   stream, mixes, base, scale, count, static_cast<int>(hc), hc_eps, pre);
}

void hc_embed(const __nv_bfloat16* table, const int32_t* ids, int64_t tokens, int64_t hc, int64_t hidden,
              float* streams, float* pre, cudaStream_t stream) {
  if (tokens == 0 || hc > kHcMaxStreams) return;  // the model checks hc
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  launch_dependent(hc_embed_kernel, grid, kThreads, 0, stream, table, ids, static_cast<int>(hc), hidden, streams, pre);
}

void hc_post(float* streams, const __nv_bfloat16* out, const float* post, const float* comb, int64_t tokens,
             int64_t hc, int64_t hidden, cudaStream_t stream) {
  if (tokens == 0 || hc > kHcMaxStreams) return;  // the model checks hc
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  launch_dependent(hc_post_kernel, grid, kThreads, 0, stream, streams, out, post, comb, static_cast<int>(hc), hidden);
}

}  // namespace deepinfer::cuda
