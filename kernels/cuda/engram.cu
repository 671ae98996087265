#include "kernels/cuda/common.cuh"
#include "kernels/cuda/engram.cuh"
#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) engram_mix_kernel(float* streams, const float* kv, const float* q_weight,
                                                              const float* k_weight, int hc, int64_t hidden,
                                                              float eps) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x / hc;
  const int j = static_cast<int>(blockIdx.x % hc);
  float* h = streams + (t * hc + j) * hidden;
  const float* key = kv + (t * (hc + 1) + j) * hidden;
  const float* value = kv + (t * (hc + 1) + hc) * hidden;
  const float* q = q_weight + j * hidden;
  const float* k = k_weight + j * hidden;
  float hh = 0.0f, kk = 0.0f, dot = 0.0f;
  for (int64_t d = threadIdx.x; d < hidden; d += kThreads) {
    const float x = h[d], y = key[d];
    hh += x * x;
    kk += y * y;
    dot += x * (q[d] * k[d]) * y;
  }
  hh = block_sum(hh);
  kk = block_sum(kk);
  dot = block_sum(dot);
  const float H = static_cast<float>(hidden);
  const float scaled = dot / (sqrtf(hh / H + eps) * sqrtf(kk / H + eps) * sqrtf(H));
  const float root = copysignf(sqrtf(fmaxf(fabsf(scaled), 1e-6f)), scaled);
  const float gate = 1.0f / (1.0f + expf(-root));
  for (int64_t d = threadIdx.x; d < hidden; d += kThreads) h[d] += gate * value[d];
}

__global__ void engram_hash_rows_kernel(const int32_t* token_ids, const int32_t* sources, const int32_t* compressed_ids,
                                        int64_t pad_compressed_id, const int64_t* multipliers, const int64_t* primes,
                                        const int64_t* offsets, int64_t tokens, int64_t layers, int max_ngram,
                                        int64_t heads, int32_t* rows) {
  begin_dependent_kernel();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < tokens)
    engram_hash_row(t, sources, token_ids, compressed_ids, pad_compressed_id, multipliers, primes, offsets, tokens,
                    layers, max_ngram, heads, rows);
}

}  // namespace

void engram_hash_rows(const int32_t* token_ids, const int32_t* sources, const int32_t* compressed_ids,
                      int64_t pad_compressed_id, const int64_t* multipliers, const int64_t* primes,
                      const int64_t* offsets, int64_t tokens, int64_t layers, int64_t max_ngram, int64_t heads,
                      int32_t* rows, cudaStream_t stream) {
  if (tokens == 0 || layers == 0) return;
  constexpr unsigned kHashThreads = 128;
  launch_dependent(engram_hash_rows_kernel, static_cast<unsigned>((tokens + kHashThreads - 1) / kHashThreads),
                   kHashThreads, 0, stream, token_ids, sources, compressed_ids, pad_compressed_id, multipliers, primes,
                   offsets, tokens, layers, static_cast<int>(max_ngram), heads, rows);
}

void engram_mix(float* streams, const float* kv, const float* q_weight, const float* k_weight, int64_t tokens,
                int64_t hc, int64_t hidden, float eps, cudaStream_t stream) {
  if (tokens == 0) return;
  launch_dependent(engram_mix_kernel, static_cast<unsigned>(tokens * hc), kThreads, 0, stream, streams, kv, q_weight,
                   k_weight, static_cast<int>(hc), hidden, eps);
}

}  // namespace deepinfer::cuda
