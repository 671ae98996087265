#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::cpu {

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace

void linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  // Four rows of x share each pass over a weight row, so large-m (prefill) calls read W m/4 times, not m.
  constexpr int64_t kRowTile = 4;
  const int64_t num_row_tiles = (m + kRowTile - 1) / kRowTile;
  const bool parallel = m * n * k > (1 << 16);
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t tile = 0; tile < num_row_tiles; ++tile) {
    for (int64_t j = 0; j < n; ++j) {
      const float* wj = w + j * k;
      const float b = bias ? bias[j] : 0.0f;
      const int64_t row_end = std::min(m, (tile + 1) * kRowTile);
      for (int64_t i = tile * kRowTile; i < row_end; ++i) y[i * n + j] = dot(x + i * k, wj, k) + b;
    }
  }
}

void rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float inv_rms = 1.0f / std::sqrt(dot(xr, xr, dim) / static_cast<float>(dim) + eps);
    float* outr = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) outr[i] = weight[i] * (xr[i] * inv_rms);
  }
}

void add_rms_norm(const float* x, float* residual, const float* weight, float* out, int64_t rows, int64_t dim,
                  float eps) {
  if (x != nullptr) axpy(1.0f, x, residual, rows * dim);
  rms_norm(residual, weight, out, rows, dim, eps);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void clamp_swiglu(float* gate, float* up, int64_t n, float limit) {
  if (limit <= 0.0f) return;
  for (int64_t i = 0; i < n; ++i) {
    up[i] = std::clamp(up[i], -limit, limit);
    gate[i] = std::min(gate[i], limit);
  }
}

void embedding(const float* table, const int32_t* ids, float* out, int64_t num_tokens, int64_t dim) {
  for (int64_t t = 0; t < num_tokens; ++t) std::copy_n(table + static_cast<int64_t>(ids[t]) * dim, dim, out + t * dim);
}

void gather_byte_rows(const uint8_t* table, int64_t row_bytes, const int64_t* rows, int64_t num_rows, uint8_t* out,
                      int64_t out_stride) {
  for (int64_t i = 0; i < num_rows; ++i) std::copy_n(table + rows[i] * row_bytes, row_bytes, out + i * out_stride);
}

void softmax(float* x, int64_t n) {
  const float max_value = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv_sum = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

void rope(float* x, int64_t rows, int64_t row_stride, int64_t rope_dim, const float* cos, const float* sin,
          int64_t rows_per_position, RopeLayout layout) {
  const int64_t half = rope_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * row_stride;
    const float* c = cos + (r / rows_per_position) * half;
    const float* s = sin + (r / rows_per_position) * half;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = layout == RopeLayout::kInterleaved ? 2 * i : i;
      const int64_t b = layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + half;
      const float x0 = xr[a];
      const float x1 = xr[b];
      xr[a] = x0 * c[i] - x1 * s[i];
      xr[b] = x1 * c[i] + x0 * s[i];
    }
  }
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void write_kv_entries(const float* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens, int64_t dim,
                      float* cache, int64_t cache_stride) {
  for (int64_t t = 0; t < num_tokens; ++t) std::copy_n(src + t * src_stride, dim, cache + slots[t] * cache_stride);
}

void gather_kv_entries(const float* cache, const int64_t* slots, int64_t num_tokens, int64_t dim, float* out) {
  for (int64_t t = 0; t < num_tokens; ++t) std::copy_n(cache + slots[t] * dim, dim, out + t * dim);
}

void batched_gemv(const float* x, const float* w, float* y, int64_t batch, int64_t m, int64_t n, int64_t k,
                  GemvLayout l) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < m; ++t)
      for (int64_t i = 0; i < n; ++i)
        y[b * l.y_batch + t * l.y_row + i] = dot(x + b * l.x_batch + t * l.x_row, w + b * l.w_batch + i * k, k);
}

void batched_gemv_transposed(const float* x, const float* w, float* y, int64_t batch, int64_t m, int64_t n, int64_t k,
                             GemvLayout l) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < k; ++i) sum += x[b * l.x_batch + t * l.x_row + i] * w[b * l.w_batch + i * l.w_row + j];
        y[b * l.y_batch + t * l.y_row + j] = sum;
      }
}

}  // namespace deepinfer::cpu
