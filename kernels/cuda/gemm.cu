#include "kernels/cuda/gemm.cuh"

#include <cuda_runtime_api.h>

#include <vector>

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

namespace {

// The A, B and C pointer arrays of a batched call, copied to the device workspace on the handle's stream (the
// sizes and scalars stay on the host).
bool upload_pointers(cublasHandle_t handle, const std::vector<const void*>& pointers, void** workspace) {
  cudaStream_t stream = nullptr;
  cublasGetStream(handle, &stream);
  return cudaMemcpyAsync(workspace, pointers.data(), pointers.size() * sizeof(void*), cudaMemcpyHostToDevice,
                         stream) == cudaSuccess;
}

}  // namespace

cublasStatus_t grouped_gemm_bf16(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                 __nv_bfloat16* y, const int32_t* host_offsets, int64_t num_experts, int64_t n,
                                 int64_t k, void** pointer_workspace) {
  // Per non-empty expert (column-major view, as gemm_bf16): C[n, rows] = W_e^T[n, k] . X_e[k, rows].
  std::vector<const void*> a, b;
  std::vector<void*> c;
  std::vector<int> m_array, n_array, k_array, lda, ldb, ldc, group_size;
  std::vector<cublasOperation_t> trans_a, trans_b;
  std::vector<float> alpha, beta;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t rows = host_offsets[e + 1] - host_offsets[e];
    if (rows == 0) continue;
    a.push_back(w + e * n * k);
    b.push_back(x + host_offsets[e] * k);
    c.push_back(y + host_offsets[e] * n);
    m_array.push_back(static_cast<int>(n));
    n_array.push_back(static_cast<int>(rows));
    k_array.push_back(static_cast<int>(k));
    lda.push_back(static_cast<int>(k));
    ldb.push_back(static_cast<int>(k));
    ldc.push_back(static_cast<int>(n));
    trans_a.push_back(CUBLAS_OP_T);
    trans_b.push_back(CUBLAS_OP_N);
    group_size.push_back(1);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
  }
  const auto groups = static_cast<int>(a.size());
  if (groups == 0) return CUBLAS_STATUS_SUCCESS;
  std::vector<const void*> pointers;
  pointers.insert(pointers.end(), a.begin(), a.end());
  pointers.insert(pointers.end(), b.begin(), b.end());
  pointers.insert(pointers.end(), c.begin(), c.end());
  if (!upload_pointers(handle, pointers, pointer_workspace)) return CUBLAS_STATUS_EXECUTION_FAILED;
  auto* device_a = reinterpret_cast<const void* const*>(pointer_workspace);
  auto* device_b = device_a + groups;
  auto* device_c = reinterpret_cast<void* const*>(pointer_workspace + 2 * groups);
  return cublasGemmGroupedBatchedEx(handle, trans_a.data(), trans_b.data(), m_array.data(), n_array.data(),
                                    k_array.data(), alpha.data(), device_a, CUDA_R_16BF, lda.data(), device_b,
                                    CUDA_R_16BF, ldb.data(), beta.data(), device_c, CUDA_R_16BF, ldc.data(), groups,
                                    group_size.data(), CUBLAS_COMPUTE_32F);
}

cublasStatus_t chunked_gemm_bf16(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                 __nv_bfloat16* y, const std::vector<int32_t>& chunk_expert, int64_t chunk, int64_t n,
                                 int64_t k, void** pointer_workspace) {
  const auto chunks = static_cast<int64_t>(chunk_expert.size());
  if (chunks == 0) return CUBLAS_STATUS_SUCCESS;
  // Column-major view, as grouped_gemm_bf16: C[n, chunk] = W_e^T[n, k] . X_j[k, chunk].
  std::vector<const void*> pointers(3 * chunks);
  for (int64_t j = 0; j < chunks; ++j) {
    pointers[j] = w + static_cast<int64_t>(chunk_expert[j]) * n * k;
    pointers[chunks + j] = x + j * chunk * k;
    pointers[2 * chunks + j] = y + j * chunk * n;
  }
  if (!upload_pointers(handle, pointers, pointer_workspace)) return CUBLAS_STATUS_EXECUTION_FAILED;
  auto* device_a = reinterpret_cast<const void* const*>(pointer_workspace);
  auto* device_b = device_a + chunks;
  auto* device_c = reinterpret_cast<void* const*>(pointer_workspace + 2 * chunks);
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(chunk),
                             static_cast<int>(k), &alpha, device_a, CUDA_R_16BF, static_cast<int>(k), device_b,
                             CUDA_R_16BF, static_cast<int>(k), &beta, device_c, CUDA_R_16BF, static_cast<int>(n),
                             static_cast<int>(chunks), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

}  // namespace deepinfer::cuda
