#include "kernels/cuda/gemm.cuh"

namespace deepinfer::cuda {

// Row-major y = x . op(W) is column-major y^T = op(W)^T . x^T: cuBLAS sees W first, x second.
cublasStatus_t gemm_bf16(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, GemmOperand x, GemmOperand w,
                         bool transpose_w, void* y, int64_t ldy, int64_t y_batch_stride, bool y_fp32, int64_t batch,
                         float beta) {
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const float alpha = 1.0f;
  const cublasOperation_t op_w = transpose_w ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t y_type = y_fp32 ? CUDA_R_32F : CUDA_R_16BF;
  if (batch == 1)
    return cublasGemmEx(handle, op_w, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                        &alpha, w.data, CUDA_R_16BF, static_cast<int>(w.ld), x.data, CUDA_R_16BF,
                        static_cast<int>(x.ld), &beta, y, y_type, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
  return cublasGemmStridedBatchedEx(handle, op_w, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                    static_cast<int>(k), &alpha, w.data, CUDA_R_16BF, static_cast<int>(w.ld),
                                    w.batch_stride, x.data, CUDA_R_16BF, static_cast<int>(x.ld), x.batch_stride, &beta,
                                    y, y_type, static_cast<int>(ldy), y_batch_stride, static_cast<int>(batch),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t grouped_gemm_bf16(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                 __nv_bfloat16* y, const int32_t* host_offsets, int64_t num_experts, int64_t n,
                                 int64_t k) {
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t rows = host_offsets[e + 1] - host_offsets[e];
    if (rows == 0) continue;
    const cublasStatus_t status = linear_bf16(handle, x + host_offsets[e] * k, w + e * n * k,
                                              y + host_offsets[e] * n, false, rows, n, k);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace deepinfer::cuda
