#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hyper_connections.cuh"
#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

namespace cg = cooperative_groups;

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

// One hyper-connection site in one launch (hc_site). A cluster of kSiteCluster blocks takes a group of tokens; block
// r of it the columns [r slice, (r + 1) slice) of every stream of those tokens, in groups of 8 ("octs"), each oct read
// by kSiteParts lanes side by side (one warp: the parts of an oct never cross warps). Every lane of an oct reads the
// oct's streams and sums its share of the mixes' dot products with fn; lane 0 of it also the flat and the collapsed
// squares and the collapsed values (kept in shared memory for the norm). The partial sums meet in a fixed order:
// across the lanes of a part (shuffles), the warps of the block, then the blocks of the cluster (distributed shared
// memory, rank order), so every block holds the same totals and a launch gives the same bits every time (graphs ==
// eager). Why one launch: at decode the chain of five kernels was latency, not bytes (~100 us a site at 8 tokens for
// ~2 MB), and the collapse reads the *previous* site's weights, so it needs nothing the mixes produce.
constexpr int kSiteParts = 4;        // lanes an oct's mixes are split over (a power of 2: the shuffles below)
constexpr int kSiteCluster = 8;      // the portable cluster size
constexpr int kSiteMaxTokens = 8;    // tokens a cluster takes at most
constexpr int kSiteMaxThreads = 512;
constexpr int kSiteSharedBytes = 48 * 1024;  // without the opt-in for more

template <int HC>
struct SiteShape {
  static constexpr int M = (2 + HC) * HC;                         // the mixes
  static constexpr int MP = (M + kSiteParts - 1) / kSiteParts;    // the mixes a part sums
  static constexpr int V = MP + 2;                                // + part 0's flat and collapsed squares
  static constexpr int W = kSiteParts * V;                        // the values a token's block sums hold
};

__device__ __forceinline__ void load8(const float* p, float (&x)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ void store8(float* p, const float (&x)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(x[4], x[5], x[6], x[7]);
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&x)[8]) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    x[2 * i] = f.x, x[2 * i + 1] = f.y;
  }
}

// hc_mixes_kernel's arithmetic for one token, by one warp: lane j HC + k holds comb's (j, k) (lanes past HC^2
// repeat the first ones, so that every lane takes part in the shuffles), and each sum takes its terms in the serial
// order, so the bits are the serial loop's. Why a warp: the 2 x sinkhorn_iters normalisations are the launch's
// longest chain, and a lane an element makes each of them one division deep instead of HC^2.
// `mix(i)` gives the token's mix i.
template <int HC, class Mix>
__device__ void site_mixes(Mix m, const float* base, const float* scale, float hc_eps, int sinkhorn_iters, float* pre,
                           float* post, float* comb) {
  const int lane = static_cast<int>(threadIdx.x) % 32, e = lane % (HC * HC), j = e / HC, k = e % HC;
  if (lane < HC) {
    pre[lane] = sigmoid(m(lane) * scale[0] + base[lane]) + hc_eps;
    post[lane] = 2.0f * sigmoid(m(HC + lane) * scale[1] + base[HC + lane]);
  }
  const auto row_sum = [&](float v) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < HC; ++i) sum += __shfl_sync(0xffffffffu, v, j * HC + i);
    return sum;
  };
  const auto column_sum = [&](float v) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < HC; ++i) sum += __shfl_sync(0xffffffffu, v, i * HC + k);
    return sum;
  };
  float c = m(2 * HC + e) * scale[2] + base[2 * HC + e];
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < HC; ++i) max = fmaxf(max, __shfl_sync(0xffffffffu, c, j * HC + i));
  c = expf(c - max);
  c = c / row_sum(c) + hc_eps;  // the row softmax, + eps
  const int rounds = sinkhorn_iters > 1 ? sinkhorn_iters : 1;  // the first columns pass always runs
  for (int it = 0; it < rounds; ++it) {
    if (it > 0) c /= row_sum(c) + hc_eps;
    c /= column_sum(c) + hc_eps;
  }
  if (lane < HC * HC) comb[e] = c;
}

template <int HC>
__global__ void __launch_bounds__(kSiteMaxThreads)
    hc_site_kernel(float* streams, const __nv_bfloat16* out, const float* pre, HcSiteWeights w, int64_t tokens,
                   int hidden, int slice, int group, float eps, float hc_eps, int sinkhorn_iters, float* next_pre,
                   float* post, float* comb, __nv_bfloat16* h) {
  using S = SiteShape<HC>;
  constexpr int M = S::M, MP = S::MP, V = S::V, W = S::W;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(blockIdx.y), ranks = static_cast<int>(gridDim.y);  // cluster (1, ranks, 1)
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * group;
  const int count = static_cast<int>(min(static_cast<int64_t>(group), tokens - t0));
  const int col0 = rank * slice, cols = max(0, min(slice, hidden - col0)), octs = cols / 8;
  const int64_t D = static_cast<int64_t>(HC) * hidden;
  const int part = static_cast<int>(threadIdx.x) % kSiteParts, lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, warps = static_cast<int>(blockDim.x) / 32;

  extern __shared__ float shared[];
  float* collapsed = shared;                         // [group][slice]
  float* warp_sums = collapsed + group * slice;      // [group][warps][W]
  float* block_sums = warp_sums + group * warps * W;  // [group][W], read by the whole cluster
  float* totals = block_sums + group * W;             // [group][W], the cluster's

  // The block's rows of fn are weights resident since start-up (no kernel writes them): fetching them into L2
  // before the wait overlaps that with the previous kernel's end.
  if (blockIdx.x == 0)
    for (int i = static_cast<int>(threadIdx.x); i < M * HC * ((cols * 2 + 127) / 128); i += blockDim.x) {
      const int row = i % (M * HC), line = i / (M * HC);
      const __nv_bfloat16* p = w.fn + (row / HC) * D + (row % HC) * static_cast<int64_t>(hidden) + col0 + line * 64;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
  begin_dependent_kernel();

  for (int g = 0; g < count; ++g) {
    const int64_t t = t0 + g;
    float weights[HC], mix_post[HC], mix_comb[HC * HC];
#pragma unroll
    for (int j = 0; j < HC; ++j) weights[j] = pre[t * HC + j];
    if (out != nullptr) {  // the previous sublayer's post and comb, read before this launch writes its own
#pragma unroll
      for (int j = 0; j < HC; ++j) mix_post[j] = post[t * HC + j];
#pragma unroll
      for (int i = 0; i < HC * HC; ++i) mix_comb[i] = comb[t * HC * HC + i];
    }
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    for (int o = static_cast<int>(threadIdx.x) / kSiteParts; o < octs; o += static_cast<int>(blockDim.x) / kSiteParts) {
      const int col = col0 + 8 * o;
      float* row = streams + t * HC * hidden + col;
      float x[HC][8];
#pragma unroll
      for (int j = 0; j < HC; ++j) load8(row + static_cast<int64_t>(j) * hidden, x[j]);
      if (out != nullptr) {  // hc_post_kernel's sums, in its order
        float o8[8];
        load8(out + t * hidden + col, o8);
        float mixed[HC][8];
#pragma unroll
        for (int k = 0; k < HC; ++k)
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            float v = 0.0f;
#pragma unroll
            for (int j = 0; j < HC; ++j) v += mix_comb[j * HC + k] * x[j][c];
            mixed[k][c] = v + mix_post[k] * o8[c];
          }
        // Every part of the oct (4 lanes side by side, all in this iteration) has read the streams before part 0
        // writes them back.
        __syncwarp(((1u << kSiteParts) - 1) << (lane & ~(kSiteParts - 1)));
#pragma unroll
        for (int k = 0; k < HC; ++k) {
          if (part == 0) store8(row + static_cast<int64_t>(k) * hidden, mixed[k]);
#pragma unroll
          for (int c = 0; c < 8; ++c) x[k][c] = mixed[k][c];
        }
      }
#pragma unroll
      for (int mi = 0; mi < MP; ++mi) {
        const int m = part * MP + mi;
        if (m >= M) break;
#pragma unroll
        for (int j = 0; j < HC; ++j) {
          float f[8];
          load8(w.fn + m * D + static_cast<int64_t>(j) * hidden + col, f);
#pragma unroll
          for (int c = 0; c < 8; ++c) acc[mi] += x[j][c] * f[c];
        }
      }
      if (part == 0) {
#pragma unroll
        for (int j = 0; j < HC; ++j)
#pragma unroll
          for (int c = 0; c < 8; ++c) acc[MP] += x[j][c] * x[j][c];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          float v = 0.0f;
#pragma unroll
          for (int j = 0; j < HC; ++j) v += weights[j] * x[j][c];
          collapsed[g * slice + 8 * o + c] = v;
          acc[MP + 1] += v * v;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int offset = 16; offset >= kSiteParts; offset /= 2) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
    if (lane < kSiteParts) {
#pragma unroll
      for (int i = 0; i < V; ++i) warp_sums[(g * warps + warp) * W + lane * V + i] = acc[i];
    }
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < count * W; i += blockDim.x) {
    const int g = i / W, v = i % W;
    float sum = 0.0f;
    for (int k = 0; k < warps; ++k) sum += warp_sums[(g * warps + k) * W + v];
    block_sums[i] = sum;
  }
  cluster.sync();  // every block's sums written and visible across the cluster
  for (int i = static_cast<int>(threadIdx.x); i < count * W; i += blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < ranks; ++r) sum += cluster.map_shared_rank(block_sums, r)[i];
    totals[i] = sum;
  }
  __syncthreads();
  // Token g's mixes by warp 0 of the block of rank g % ranks, while the other warps write h.
  if (warp == 0)
    for (int g = rank; g < count; g += ranks) {
      const int64_t t = t0 + g;
      const float* sums = totals + g * W;
      const float inv = 1.0f / sqrtf(sums[MP] / static_cast<float>(D) + eps);  // hc_flat_rms_norm's
      const auto mix = [&](int i) { return sums[(i / MP) * V + i % MP] * inv; };  // part i / MP's sum i % MP
      site_mixes<HC>(mix, w.base, w.scale, hc_eps, sinkhorn_iters, next_pre + t * HC, post + t * HC,
                     comb + t * HC * HC);
    }
  for (int g = 0; g < count; ++g) {
    const float inv = rsqrtf(totals[g * W + MP + 1] / static_cast<float>(hidden) + eps);  // hc_collapse_rms_norm's
    const int64_t t = t0 + g;
    for (int c = static_cast<int>(threadIdx.x); c < cols; c += blockDim.x)
      h[t * hidden + col0 + c] = to_bf16(to_float(w.norm[col0 + c]) * (collapsed[g * slice + c] * inv));
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
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

namespace {

template <int HC>
void launch_hc_site(float* streams, const __nv_bfloat16* out, const float* pre, const HcSiteWeights& w, int64_t tokens,
                    int64_t hidden, float eps, float hc_eps, int64_t sinkhorn_iters, float* next_pre, float* post,
                    float* comb, __nv_bfloat16* h, cudaStream_t stream) {
  using S = SiteShape<HC>;
  const int64_t slice = (hidden / 8 + kSiteCluster - 1) / kSiteCluster * 8;  // columns a block takes, whole octs
  const int64_t threads = std::clamp<int64_t>((slice / 8 * kSiteParts + 31) / 32 * 32, 32, kSiteMaxThreads);
  const int64_t warps = threads / 32;
  // A cluster per 8 tokens at most, and at least ~32 clusters' worth of tokens a group: up to 32 tokens the grid is
  // a cluster a token (fn read by more SMs), beyond it each block reads its fn rows once for several tokens.
  int64_t group = std::clamp<int64_t>((tokens + 31) / 32, 1, kSiteMaxTokens);
  const auto shared_bytes = [&](int64_t g) {
    return static_cast<size_t>(g * slice + g * warps * S::W + 2 * g * S::W) * sizeof(float);
  };
  while (group > 1 && shared_bytes(group) > kSiteSharedBytes) --group;
  const dim3 grid(static_cast<unsigned>((tokens + group - 1) / group), kSiteCluster);
  launch_dependent_clustered(hc_site_kernel<HC>, grid, static_cast<unsigned>(threads), shared_bytes(group), stream,
                             kSiteCluster, streams, out, pre, w, tokens, static_cast<int>(hidden),
                             static_cast<int>(slice), static_cast<int>(group), eps, hc_eps,
                             static_cast<int>(sinkhorn_iters), next_pre, post, comb, h);
}

}  // namespace

bool hc_site_supports(int64_t hc, int64_t hidden) {
  return hc >= 1 && hc <= kHcSiteMaxStreams && hidden > 0 && hidden % 8 == 0 && hidden <= kHcMaxHidden;
}

void hc_site(float* streams, const __nv_bfloat16* out, const float* pre, const HcSiteWeights& w, int64_t tokens,
             int64_t hc, int64_t hidden, float eps, float hc_eps, int64_t sinkhorn_iters, float* next_pre, float* post,
             float* comb, __nv_bfloat16* h, cudaStream_t stream) {
  if (tokens == 0 || !hc_site_supports(hc, hidden)) return;  // the model checks hc_site_supports
  switch (hc) {
    case 1:
      return launch_hc_site<1>(streams, out, pre, w, tokens, hidden, eps, hc_eps, sinkhorn_iters, next_pre, post, comb,
                               h, stream);
    case 2:
      return launch_hc_site<2>(streams, out, pre, w, tokens, hidden, eps, hc_eps, sinkhorn_iters, next_pre, post, comb,
                               h, stream);
    case 3:
      return launch_hc_site<3>(streams, out, pre, w, tokens, hidden, eps, hc_eps, sinkhorn_iters, next_pre, post, comb,
                               h, stream);
    default:
      return launch_hc_site<4>(streams, out, pre, w, tokens, hidden, eps, hc_eps, sinkhorn_iters, next_pre, post, comb,
                               h, stream);
  }
}

}  // namespace deepinfer::cuda
