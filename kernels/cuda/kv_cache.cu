#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/launch.cuh"

namespace deepinfer::cuda {

namespace {

__global__ void write_kernel(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t dim,
                             __nv_bfloat16* cache, int64_t cache_stride) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) cache[slots[t] * cache_stride + i] = src[t * src_stride + i];
}

__global__ void gather_kernel(const __nv_bfloat16* cache, const int64_t* slots, int64_t dim, __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = cache[slots[t] * dim + i];
}

}  // namespace

void write_kv_entries(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens,
                      int64_t dim, __nv_bfloat16* cache, int64_t cache_stride, cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_dependent(write_kernel, static_cast<unsigned>(num_tokens), 128, 0, stream, src, src_stride, slots, dim, cache,
                   cache_stride);
}

void gather_kv_entries(const __nv_bfloat16* cache, const int64_t* slots, int64_t num_tokens, int64_t dim,
                       __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_dependent(gather_kernel, static_cast<unsigned>(num_tokens), 128, 0, stream, cache, slots, dim, out);
}

}  // namespace deepinfer::cuda
