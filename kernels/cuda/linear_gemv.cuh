// A Linear layer for a few rows as matrix-vector products: y[t, n] = x[t, :] . w[n, :] for t < m <= 8, each
// weight row streamed once for all m rows (cuBLAS at m = 1..8 reads the weights at a fraction of the copy
// rate and sometimes in two kernels). x, w bf16 row-major ([m, k], [n, k]); y bf16 or fp32 ([m, n]); k a
// multiple of 8 (16-byte pieces).
// swiglu_gemv: act[t, j] = bf16(silu(x[t] . gate_up[j]) * (x[t] . gate_up[inter + j])) for j < inter, the
// gate and up projections of an MLP (gate rows, then up rows) and its activation in one kernel (clamped where
// swiglu_limit > 0, as silu_mul).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kLinearGemvMaxRows = 8;

// Where each operand of a batch of products starts and how its rows are strided, in elements: product b reads
// x + b * x_batch (row t at + t * x_row), w + b * w_batch (weight rows w_row apart where the layout is [k, n];
// k apart for [n, k]) and writes y + b * y_batch (row t at + t * y_row). Strides keep 16-byte pieces aligned
// (multiples of 8), except x_row for batched_gemv_transposed, which reads x element by element.
struct GemvLayout {
  int64_t x_row, x_batch, w_batch, y_row, y_batch, w_row;
};

void linear_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                 int64_t k, cudaStream_t stream);
void swiglu_gemv(const __nv_bfloat16* x, const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t m, int64_t inter,
                 int64_t k, float swiglu_limit, cudaStream_t stream);

// The absorbed MLA projections at a few rows, one product per head (cuBLAS's batched GEMM at m = 1..2 runs
// ~5 us for 2 MB of weights). batched_gemv: y[b][t, i] = x[b][t, :] . w[b][i, :] with w[b] [n, k] (W_uv: the
// attention's latent output to values); batched_gemv_transposed: y[b][t, j] = x[b][t, :] . w[b][:, j] with w[b]
// [k, n] (W_uk: the query into the latent space; the decode step runs it inside mla_prepare's launch,
// mla_prepare_absorb). bf16 outputs, fp32 sums, m <= kLinearGemvMaxRows; the rows read in 16-byte pieces (k for
// batched_gemv, n for the transposed one) are multiples of 8.
void batched_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t batch, int64_t m,
                  int64_t n, int64_t k, GemvLayout layout, cudaStream_t stream);
void batched_gemv_transposed(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t batch,
                             int64_t m, int64_t n, int64_t k, GemvLayout layout, cudaStream_t stream);

}  // namespace deepinfer::cuda
