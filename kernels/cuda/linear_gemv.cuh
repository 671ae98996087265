// A Linear layer for a few rows as matrix-vector products: y[t, n] = x[t, :] . w[n, :] for t < m <= 8, each
// weight row streamed once for all m rows (cuBLAS at m = 1..8 reads the weights at a fraction of the copy
// rate and sometimes in two kernels). x, w bf16 row-major ([m, k], [n, k]); y bf16 or fp32 ([m, n]); k a
// multiple of 8 (16-byte pieces).
// swiglu_gemv: act[t, j] = bf16(silu(x[t] . gate_up[j]) * (x[t] . gate_up[inter + j])) for j < inter, the
// gate and up projections of an MLP (gate rows, then up rows) and its activation in one kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kLinearGemvMaxRows = 8;

void linear_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool y_fp32, int64_t m, int64_t n,
                 int64_t k, cudaStream_t stream);
void swiglu_gemv(const __nv_bfloat16* x, const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t m, int64_t inter,
                 int64_t k, cudaStream_t stream);

}  // namespace deepinfer::cuda
