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

}  // namespace

void embedding(const __nv_bfloat16* table, const int32_t* ids, __nv_bfloat16* out, int64_t num_tokens, int64_t dim,
               cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_dependent(embedding_kernel, static_cast<unsigned>(num_tokens), 256, 0, stream, table, ids, out, dim);
}

}  // namespace deepinfer::cuda
