// The CPU reference ops: plain loops, fp32 storage and fp32 accumulation, OpenMP over independent rows or
// output features. Flat launchers: pointers and sizes, no allocation, no knowledge of the model.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n]   (w in PyTorch Linear layout [out, in]; bias may be null)
void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight   (out may alias x)
void rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps);

// residual[r, :] += x[r, :] (x may be null: no add); out[r, :] = rms_norm(residual[r, :]) * weight.
void add_rms_norm(const float* x, float* residual, const float* weight, float* out, int64_t rows, int64_t dim,
                  float eps);

// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
// DeepSeek-V4.1's SwiGLU clamp before silu_mul: with limit > 0, up into [-limit, limit] and gate to at most limit
// (the CUDA kernels' clamp_swiglu, kernels/cuda/common.cuh); limit 0 leaves both.
void clamp_swiglu(float* gate, float* up, int64_t n, float limit);

// out[t, :] = table[ids[t], :]
void embedding(const float* table, const int32_t* ids, float* out, int64_t num_tokens, int64_t dim);
// out + i * out_stride <- the row_bytes bytes of table + rows[i] * row_bytes (rows of any format).
void gather_byte_rows(const uint8_t* table, int64_t row_bytes, const int64_t* rows, int64_t num_rows, uint8_t* out,
                      int64_t out_stride);

// In-place numerically stable softmax over n values.
void softmax(float* x, int64_t n);

// Rotary embedding on x[r, 0:rope_dim] of `rows` rows spaced `row_stride` floats apart. Consecutive groups of
// `rows_per_position` rows (e.g. the heads of one token) share one position; cos/sin hold rope_dim/2 values
// (one per frequency) per position.
//  kInterleaved: pairs (x[2i], x[2i+1]) rotate by frequency i and stay in place (DeepSeek's checkpoints).
//  kHalf:        pairs (x[i], x[i + rope_dim/2]) (the rotate_half convention).
enum class RopeLayout { kInterleaved, kHalf };
void rope(float* x, int64_t rows, int64_t row_stride, int64_t rope_dim, const float* cos, const float* sin,
          int64_t rows_per_position, RopeLayout layout);

// y[i] += alpha * x[i]
void axpy(float alpha, const float* x, float* y, int64_t n);

// One layer of a paged KV cache, by flat slot: cache[slots[t], 0:dim] = src[t * src_stride, 0:dim] (cache rows
// cache_stride apart), and out[t, :] = cache[slots[t], :] (rows dim apart).
void write_kv_entries(const float* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens, int64_t dim,
                      float* cache, int64_t cache_stride);
void gather_kv_entries(const float* cache, const int64_t* slots, int64_t num_tokens, int64_t dim, float* out);

// Per-head products, as kernels/cuda/linear_gemv.cuh's batched_gemv (w[b] [n, k]) and batched_gemv_transposed
// (w[b] [k, n]); product b reads x + b * x_batch (row t at + t * x_row), w + b * w_batch and writes y + b * y_batch
// (row t at + t * y_row); w_row is the row stride of w[b] ([k, n]: n values a row, or more).
struct GemvLayout {
  int64_t x_row, x_batch, w_batch, y_row, y_batch, w_row;
};
void batched_gemv(const float* x, const float* w, float* y, int64_t batch, int64_t m, int64_t n, int64_t k,
                  GemvLayout layout);
void batched_gemv_transposed(const float* x, const float* w, float* y, int64_t batch, int64_t m, int64_t n, int64_t k,
                             GemvLayout layout);

}  // namespace deepinfer::cpu
