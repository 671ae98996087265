// Dense GEMMs through cuBLAS in bf16 with fp32 accumulation, for row-major operands:
//   y_b[m, n] = x_b[m, k] . W_b^T   (transpose_w: W_b is [n, k], PyTorch Linear layout)
//   y_b[m, n] = x_b[m, k] . W_b     (otherwise: W_b is [k, n])
// for b in [0, batch), with leading dimensions and batch strides in elements. y is bf16 or fp32.
// grouped_gemm_bf16 runs one Linear per expert over its rows [offsets[e], offsets[e+1]) of x (host offsets).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

namespace deepinfer::cuda {

struct GemmOperand {
  const void* data;
  int64_t ld;
  int64_t batch_stride = 0;
};

cublasStatus_t gemm_bf16(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, GemmOperand x, GemmOperand w,
                         bool transpose_w, void* y, int64_t ldy, int64_t y_batch_stride, bool y_fp32, int64_t batch,
                         float beta = 0.0f);

// Convenience: y[m, n] = x[m, k] . w[n, k]^T, all contiguous.
inline cublasStatus_t linear_bf16(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, void* y,
                                  bool y_fp32, int64_t m, int64_t n, int64_t k) {
  return gemm_bf16(handle, m, n, k, {x, k}, {w, k}, true, y, n, 0, y_fp32, 1);
}

// w: [num_experts, n, k] (expert-major); x, y: [offsets[E], k] / [offsets[E], n]. One cuBLAS grouped-batched
// call over the non-empty experts. `pointer_workspace`: device memory for 3 * num_experts pointers.
cublasStatus_t grouped_gemm_bf16(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                 __nv_bfloat16* y, const int32_t* host_offsets, int64_t num_experts, int64_t n,
                                 int64_t k, void** pointer_workspace);

// The same per-expert Linear over rows cut into chunks of `chunk` rows: chunk j holds rows [j * chunk, (j + 1) *
// chunk) of x and y and belongs to expert chunk_expert[j] (host). One batched call with uniform shapes, whose
// tiles cuBLAS picks for the whole batch. `pointer_workspace`: device memory for 3 * num_chunks pointers.
cublasStatus_t chunked_gemm_bf16(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                 __nv_bfloat16* y, const std::vector<int32_t>& chunk_expert, int64_t chunk, int64_t n,
                                 int64_t k, void** pointer_workspace);

}  // namespace deepinfer::cuda
