#include "kernels/cuda/dummy_init.cuh"

namespace deepinfer::cuda {

namespace {

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ double uniform_at(uint64_t key, uint64_t index) {
  return (static_cast<double>(splitmix64(key ^ splitmix64(index)) >> 11) + 0.5) * 0x1.0p-53;
}

__device__ float normal_at(uint64_t key, uint64_t index) {
  const double u1 = uniform_at(key, 2 * index);
  const double u2 = uniform_at(key, 2 * index + 1);
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

template <class T>
__global__ void fill_kernel(T* out, int64_t n, uint64_t key, float scale, float offset, int64_t first_index) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = offset + scale * normal_at(key, static_cast<uint64_t>(first_index + i));
    if constexpr (sizeof(T) == 2) out[i] = __float2bfloat16(v);
    else out[i] = v;
  }
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 32)); }

}  // namespace

void fill_dummy_bf16(__nv_bfloat16* out, int64_t n, uint64_t key, float scale, float offset, cudaStream_t stream,
                     int64_t first_index) {
  if (n > 0) fill_kernel<<<grid_for(n), 256, 0, stream>>>(out, n, key, scale, offset, first_index);
}

void fill_dummy_f32(float* out, int64_t n, uint64_t key, float scale, float offset, cudaStream_t stream,
                    int64_t first_index) {
  if (n > 0) fill_kernel<<<grid_for(n), 256, 0, stream>>>(out, n, key, scale, offset, first_index);
}

}  // namespace deepinfer::cuda
