#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

namespace {

__global__ void embedding_kernel(const __nv_bfloat16* table, const int32_t* ids, __nv_bfloat16* out, int64_t dim) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* src = table + static_cast<int64_t>(ids[t]) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = src[i];
}

__global__ void gather_byte_rows_kernel(const uint8_t* table, int64_t row_bytes, const int64_t* rows, uint8_t* out,
                                        int64_t out_stride) {
  begin_dependent_kernel();
  const uint8_t* src = table + rows[blockIdx.x] * row_bytes;
  uint8_t* dst = out + static_cast<int64_t>(blockIdx.x) * out_stride;
  for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = src[i];
}

__global__ void gather_int32_rows_kernel(const int32_t* table, int64_t width, const int32_t* rows, int32_t* out) {
  begin_dependent_kernel();
  const int32_t* src = table + static_cast<int64_t>(rows[blockIdx.x]) * width;
  int32_t* dst = out + static_cast<int64_t>(blockIdx.x) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void embedding(const __nv_bfloat16* table, const int32_t* ids, __nv_bfloat16* out, int64_t num_tokens, int64_t dim,
               cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_dependent(embedding_kernel, static_cast<unsigned>(num_tokens), 256, 0, stream, table, ids, out, dim);
}

void gather_byte_rows(const uint8_t* table, int64_t row_bytes, const int64_t* rows, int64_t num_rows, uint8_t* out,
                      int64_t out_stride, cudaStream_t stream) {
  if (num_rows == 0) return;
  launch_dependent(gather_byte_rows_kernel, static_cast<unsigned>(num_rows), 128, 0, stream, table, row_bytes, rows,
                   out, out_stride);
}

void gather_int32_rows(const int32_t* table, int64_t width, const int32_t* rows, int64_t num_rows, int32_t* out,
                       cudaStream_t stream) {
  if (num_rows == 0) return;
  launch_dependent(gather_int32_rows_kernel, static_cast<unsigned>(num_rows), 128, 0, stream, table, width, rows, out);
}

}  // namespace deepinfer::cuda
