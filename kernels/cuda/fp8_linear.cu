#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/gemv_transposed.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/fp_formats.h"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;

// A weight's scale at (row, col), the grid's type fixed at compile time (ue8m0 bytes a 32 x 32 block, or fp32 a
// block x block tile).
template <bool kF32>
struct ScaleGrid {
  const void* data;
  int64_t per_row;
  int block;
  explicit ScaleGrid(const Fp8BlockScales& s, int64_t k) : data(s.data), per_row(s.per_row(k)), block(s.block) {}
  __device__ __forceinline__ float at(int64_t row, int64_t col) const {
    const int b = kF32 ? block : 32;
    const int64_t i = (row / b) * per_row + col / b;
    if constexpr (kF32) return __ldg(static_cast<const float*>(data) + i);
    else return ue8m0_scale(__ldg(static_cast<const uint8_t*>(data) + i));
  }
};

// The largest of a 256-thread block's values, for every thread.
__device__ __forceinline__ float block_max_256(float value) {
  __shared__ float partial[8];
  value = warp_max(value);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
  __syncthreads();
  value = partial[0];
  for (int i = 1; i < 8; ++i) value = fmaxf(value, partial[i]);
  return value;
}

// A block of 256 threads per 32 x 32 weight block: its largest magnitude, then 4 codes a thread.
__global__ void __launch_bounds__(256) quantize_kernel(const __nv_bfloat16* w, int64_t k, uint8_t* codes,
                                                       uint8_t* scales) {
  begin_dependent_kernel();
  const int64_t r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
  const int64_t r = r0 + threadIdx.x / 8, c = c0 + (threadIdx.x % 8) * 4;
  float v[4], amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i] = to_float(w[r * k + c + i])));
  amax = block_max_256(amax);
  const uint8_t byte = fp8_weight_scale_byte(amax);
  if (threadIdx.x == 0) scales[blockIdx.y * gridDim.x + blockIdx.x] = byte;
  const float scale = ue8m0_value(byte);
#pragma unroll
  for (int i = 0; i < 4; ++i) codes[r * k + c + i] = static_cast<uint8_t>(e4m3_code(fminf(fmaxf(v[i] / scale, -448.0f), 448.0f)));
}

// A block of 256 threads per block x block tile (DeepSeek-V3's form): its largest magnitude, scale = amax / 448 (1
// for a zero tile), codes = e4m3(value / scale). Tiles at the edges may be partial.
__global__ void __launch_bounds__(256) quantize_scaled_kernel(const __nv_bfloat16* w, int64_t n, int64_t k, int block,
                                                              uint8_t* codes, float* scales) {
  begin_dependent_kernel();
  const int64_t r0 = blockIdx.y * static_cast<int64_t>(block), c0 = blockIdx.x * static_cast<int64_t>(block);
  const int64_t rows = min(static_cast<int64_t>(block), n - r0), cols = min(static_cast<int64_t>(block), k - c0);
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < rows * cols; i += blockDim.x)
    amax = fmaxf(amax, fabsf(to_float(w[(r0 + i / cols) * k + c0 + i % cols])));
  amax = block_max_256(amax);
  const float scale = fp8_tile_scale(amax);
  if (threadIdx.x == 0) scales[blockIdx.y * gridDim.x + blockIdx.x] = scale;
  for (int64_t i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int64_t at = (r0 + i / cols) * k + c0 + i % cols;
    codes[at] = static_cast<uint8_t>(e4m3_code(fminf(fmaxf(to_float(w[at]) / scale, -448.0f), 448.0f)));
  }
}

// A thread per 16 codes (one 16-byte load), two 16-byte stores of bf16.
template <bool kF32>
__global__ void dequantize_kernel(const uint8_t* codes, ScaleGrid<kF32> scales, int64_t k, int64_t pieces,
                                  __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= pieces) return;
  const int64_t first = p * 16, r = first / k, c = first % k;
  const float scale = scales.at(r, c);
  const uint4 raw = reinterpret_cast<const uint4*>(codes)[p];
  const uint32_t* words = reinterpret_cast<const uint32_t*>(&raw);
  uint4 result[2];
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(result);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 v = e4m3x2_to_float2((words[i / 2] >> (16 * (i % 2))) & 0xffffu);
    pairs[i] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
  }
  reinterpret_cast<uint4*>(out)[2 * p] = result[0];
  reinterpret_cast<uint4*>(out)[2 * p + 1] = result[1];
}

// A warp per output column j; lane L takes codes [16 (L + 32 s), +16) of each step s: one scale, 16 products per
// x row (x read through L1, shared by the block's warps).
template <int kRows, bool kF32>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const __nv_bfloat16* x, int64_t x_row, const uint8_t* codes, ScaleGrid<kF32> scales, void* y,
                int64_t y_row, bool y_fp32, int64_t n, int64_t k) {
  begin_dependent_kernel();
  const int lane = threadIdx.x % 32;
  const int64_t j = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  if (j >= n) return;
  float sum[kRows] = {};
  const uint8_t* row = codes + j * k;
  for (int64_t c = 16 * lane; c < k; c += 16 * 32) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(row + c));
    const float scale = scales.at(j, c);
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&raw);
    float w[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 v = e4m3x2_to_float2((words[i / 2] >> (16 * (i % 2))) & 0xffffu);
      w[2 * i] = v.x * scale;
      w[2 * i + 1] = v.y * scale;
    }
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const uint4* xs = reinterpret_cast<const uint4*>(x + t * x_row + c);
      const uint4 x0 = __ldg(xs), x1 = __ldg(xs + 1);
      const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&x0);
      const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x1);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
        sum[t] += w[2 * i] * fa.x + w[2 * i + 1] * fa.y + w[8 + 2 * i] * fb.x + w[9 + 2 * i] * fb.y;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    const float total = warp_sum(sum[t]);
    if (lane != 0) continue;
    if (y_fp32) static_cast<float*>(y)[t * y_row + j] = total;
    else static_cast<__nv_bfloat16*>(y)[t * y_row + j] = to_bf16(total);
  }
}

}  // namespace

void quantize_fp8_blocks(const __nv_bfloat16* w, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales,
                         cudaStream_t stream) {
  if (n == 0 || n % 32 != 0 || k % 32 != 0) return;  // the model checks
  launch_dependent(quantize_kernel, dim3(static_cast<unsigned>(k / 32), static_cast<unsigned>(n / 32)), 256, 0, stream,
                   w, k, codes, scales);
}

void quantize_fp8_scaled(const __nv_bfloat16* w, int64_t n, int64_t k, int32_t block, uint8_t* codes, float* scales,
                         cudaStream_t stream) {
  if (n == 0 || k == 0 || block <= 0) return;
  const Fp8BlockScales grid = Fp8BlockScales::fp32(scales, block);
  launch_dependent(quantize_scaled_kernel,
                   dim3(static_cast<unsigned>(grid.per_row(k)), static_cast<unsigned>((n + block - 1) / block)), 256,
                   0, stream, w, n, k, static_cast<int>(block), codes, scales);
}

namespace {

// The kernels' shape rules: 16 codes (a 16-byte load) under one scale.
bool readable(const Fp8BlockScales& scales, int64_t n, int64_t k) {
  return scales.f32 ? k % 16 == 0 && scales.block % 16 == 0 : n % 32 == 0 && k % 32 == 0;
}

}  // namespace

void dequantize_fp8_blocks(const uint8_t* codes, Fp8BlockScales scales, int64_t n, int64_t k, __nv_bfloat16* out,
                           cudaStream_t stream) {
  const int64_t pieces = n * k / 16;
  if (pieces == 0 || !readable(scales, n, k)) return;  // the model checks
  const auto blocks = static_cast<unsigned>((pieces + 255) / 256);
  if (scales.f32)
    launch_dependent(dequantize_kernel<true>, blocks, 256, 0, stream, codes, ScaleGrid<true>(scales, k), k, pieces,
                     out);
  else
    launch_dependent(dequantize_kernel<false>, blocks, 256, 0, stream, codes, ScaleGrid<false>(scales, k), k, pieces,
                     out);
}

void linear_gemv_fp8(const __nv_bfloat16* x, int64_t x_row, const uint8_t* codes, Fp8BlockScales scales, void* y,
                     int64_t y_row, bool y_fp32, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || !readable(scales, n, k)) return;
  const auto blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  with_gemv_row_count(m, [&](auto rows) {
    constexpr int kRows = decltype(rows)::value;
    if (scales.f32)
      launch_dependent(gemv_kernel<kRows, true>, blocks, kWarps * 32, 0, stream, x, x_row, codes,
                       ScaleGrid<true>(scales, k), y, y_row, y_fp32, n, k);
    else
      launch_dependent(gemv_kernel<kRows, false>, blocks, kWarps * 32, 0, stream, x, x_row, codes,
                       ScaleGrid<false>(scales, k), y, y_row, y_fp32, n, k);
  });
}

}  // namespace deepinfer::cuda
