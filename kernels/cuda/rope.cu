#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope.cuh"

namespace deepinfer::cuda {

namespace {

__global__ void rope_kernel(__nv_bfloat16* x, int64_t rows, int64_t row_stride, int64_t rope_dim,
                            const int32_t* positions, int64_t rows_per_position, const float* inv_freq,
                            float attention_factor, bool interleaved) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t half = rope_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t r = idx / half, i = idx % half;
  // fp32 angle as the CPU reference (and torch) computes it, then accurate sin/cos.
  const float angle = static_cast<float>(positions[r / rows_per_position]) * inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  c *= attention_factor;
  s *= attention_factor;
  __nv_bfloat16* row = x + r * row_stride;
  const int64_t a = interleaved ? 2 * i : i;
  const int64_t b = interleaved ? 2 * i + 1 : i + half;
  rotate_pair(to_float(row[a]), to_float(row[b]), c, s, row[a], row[b]);
}

}  // namespace

void rope(__nv_bfloat16* x, int64_t rows, int64_t row_stride, int64_t rope_dim, const int32_t* positions,
          int64_t rows_per_position, const float* inv_freq, float attention_factor, bool interleaved,
          cudaStream_t stream) {
  const int64_t work = rows * (rope_dim / 2);
  if (work == 0) return;
  launch_dependent(rope_kernel, static_cast<unsigned>((work + 255) / 256), 256, 0, stream, x, rows, row_stride,
                   rope_dim, positions, rows_per_position, inv_freq, attention_factor, interleaved);
}

}  // namespace deepinfer::cuda
