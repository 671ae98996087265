#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/fp_formats.h"

namespace deepinfer::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;  // weight rows a warp takes (independent sums: loads of all four in flight)
constexpr int kStep = 256;       // values a warp consumes a step: 8 a lane (fewer lanes at a row's end)
constexpr int kUnroll = 4;       // steps whose loads a warp issues together

__global__ void quantize_kernel(const __nv_bfloat16* x, int64_t blocks, uint8_t* codes, uint8_t* scales) {
  begin_dependent_kernel();
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= blocks) return;
  const __nv_bfloat16* v = x + b * 32;
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(to_float(v[i])));
  const uint8_t byte = ue8m0_scale_byte(amax);
  scales[b] = byte;
  const float scale = ue8m0_value(byte);
  for (int i = 0; i < 32; i += 2) {
    const float lo = fminf(fmaxf(to_float(v[i]) / scale, -6.0f), 6.0f);
    const float hi = fminf(fmaxf(to_float(v[i + 1]) / scale, -6.0f), 6.0f);
    codes[b * 16 + i / 2] = static_cast<uint8_t>(e2m1_code(lo) | (e2m1_code(hi) << 4));
  }
}

// A byte of two codes -> their values as bf16x2 (the low nibble's in the low half), in shared memory: one lookup a
// byte instead of decoding each code's bits (which had held the matrix-vector kernels near 0.4 TB/s).
__device__ __forceinline__ void fill_byte_table(uint32_t* table) {
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16(e2m1_value(b & 0xf)));
    const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16(e2m1_value(b >> 4)));
    table[b] = lo | (hi << 16);
  }
}
__device__ __forceinline__ float low_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// A thread per 8 values: 4 bytes of codes, their scale, one 16-byte store.
__global__ void dequantize_kernel(const uint8_t* codes, const uint8_t* scales, int64_t groups, __nv_bfloat16* out) {
  begin_dependent_kernel();
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  __syncthreads();
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= groups) return;
  const uint32_t c = reinterpret_cast<const uint32_t*>(codes)[g];
  const float scale = ue8m0_scale(scales[g / 4]);
  uint4 v;
  uint32_t* words = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = table[(c >> (8 * i)) & 0xffu];
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low_bf16(w) * scale, high_bf16(w) * scale);
    words[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  reinterpret_cast<uint4*>(out)[g] = v;
}

// Eight FP4 values (4 bytes of codes) times their scale, dotted with eight bf16 values.
__device__ __forceinline__ float dot8_fp4(uint32_t codes, float scale, const uint4& x, const uint32_t* table) {
  const uint32_t* xw = reinterpret_cast<const uint32_t*>(&x);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = table[(codes >> (8 * i)) & 0xffu];
    sum += low_bf16(w) * low_bf16(xw[i]) + high_bf16(w) * high_bf16(xw[i]);
  }
  return sum * scale;
}

// The warp's dot products of kRowsPerWarp FP4 rows of `n` values with one bf16 vector in shared memory. Lane L
// takes values [s + 8L, s + 8L + 8) of each step s (its scale byte: block (s + 8L) / 32); the loads of kUnroll
// steps of every row are issued before their products (more bytes in flight a warp), which adds in the same order
// as one step at a time.
__device__ __forceinline__ void dot_rows(const Fp4Rows& w, const int64_t (&rows)[kRowsPerWarp], int n,
                                         const __nv_bfloat16* vec, const uint32_t* table,
                                         float (&sums)[kRowsPerWarp]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) sums[r] = 0.0f;
  for (int s = 0; s < n; s += kStep * kUnroll) {
    uint32_t codes[kUnroll][kRowsPerWarp], scale_bytes[kUnroll][kRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = s + u * kStep + 8 * lane;  // past the row's end (the last steps): nothing loaded, nothing added
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        codes[u][r] = i < n ? __ldg(reinterpret_cast<const uint32_t*>(w.codes + rows[r] * (n / 2) + i / 2)) : 0u;
        scale_bytes[u][r] = i < n ? __ldg(w.scales + rows[r] * (n / 32) + i / 32) : 127u;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = s + u * kStep + 8 * lane;
      if (i >= n) break;
      const uint4 x = *reinterpret_cast<const uint4*>(vec + i);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        sums[r] += dot8_fp4(codes[u][r], ue8m0_scale(static_cast<uint8_t>(scale_bytes[u][r])), x, table);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) sums[r] = warp_sum(sums[r]);
}

// Block (pair p = (t, k), tile of kWarps * kRowsPerWarp / 2 rows of inter): each warp the gate and up rows of
// kRowsPerWarp / 2 activations.
template <bool kClamp>
__global__ void __launch_bounds__(kWarps * 32)
    gate_up_kernel(const __nv_bfloat16* x, const int32_t* ids, int64_t top_k, int64_t num_experts, int64_t hidden,
                   int64_t inter, Fp4Rows w, float swiglu_limit, __nv_bfloat16* act) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [hidden]
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  const int64_t pair = blockIdx.x, t = pair / top_k;
  for (int64_t i = threadIdx.x; i < hidden / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x + t * hidden)[i];
  __syncthreads();
  constexpr int kActs = kRowsPerWarp / 2;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * kActs;
  if (first >= inter) return;
  const int64_t e = ids[pair];
  if (e >= num_experts) {  // another rank's: zeros
    if (threadIdx.x % 32 < kActs && first + threadIdx.x % 32 < inter)
      act[pair * inter + first + threadIdx.x % 32] = to_bf16(0.0f);
    return;
  }
  // The warp's rows: the gate rows of its activations, then their up rows (a row past inter repeats the last).
  const int acts = static_cast<int>(inter - first < kActs ? inter - first : kActs);
  int64_t rows[kRowsPerWarp];
  for (int a = 0; a < kActs; ++a) {
    const int64_t j = first + (a < acts ? a : acts - 1);
    rows[a] = e * 2 * inter + j;
    rows[kActs + a] = e * 2 * inter + inter + j;
  }
  float sums[kRowsPerWarp];
  dot_rows(w, rows, static_cast<int>(hidden), xs, table, sums);
  if (threadIdx.x % 32 != 0) return;
  for (int a = 0; a < acts; ++a) {
    float g = sums[a], u = sums[kActs + a];
    if constexpr (kClamp) clamp_swiglu(g, u, swiglu_limit);
    act[pair * inter + first + a] = to_bf16(g / (1.0f + expf(-g)) * u);
  }
}

// Block (token t, tile of kWarps * kRowsPerWarp hidden rows): every k of the token, summed in k order onto out.
__global__ void __launch_bounds__(kWarps * 32)
    down_kernel(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t top_k,
                int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows w, __nv_bfloat16* out) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [top_k, inter]
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < top_k * inter / 8; i += blockDim.x)
    reinterpret_cast<uint4*>(as)[i] = reinterpret_cast<const uint4*>(act + t * top_k * inter)[i];
  __syncthreads();
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  if (first >= hidden) return;
  const int rows = static_cast<int>(hidden - first < kRowsPerWarp ? hidden - first : kRowsPerWarp);
  float total[kRowsPerWarp] = {};
  for (int64_t k = 0; k < top_k; ++k) {
    const int64_t e = ids[t * top_k + k];
    if (e >= num_experts) continue;
    int64_t row_ids[kRowsPerWarp];
    for (int r = 0; r < kRowsPerWarp; ++r) row_ids[r] = e * hidden + first + (r < rows ? r : rows - 1);
    float sums[kRowsPerWarp];
    dot_rows(w, row_ids, static_cast<int>(inter), as + k * inter, table, sums);
    const float weight = weights[t * top_k + k];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) total[r] += weight * sums[r];
  }
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < rows; ++r) out[t * hidden + first + r] = to_bf16(to_float(out[t * hidden + first + r]) + total[r]);
}

}  // namespace

void quantize_fp4_rows(const __nv_bfloat16* x, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales,
                       cudaStream_t stream) {
  const int64_t blocks = rows * cols / 32;
  if (blocks == 0 || cols % 32 != 0) return;
  launch_dependent(quantize_kernel, static_cast<unsigned>((blocks + 255) / 256), 256, 0, stream, x, blocks, codes,
                   scales);
}

void dequantize_fp4_rows(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                         __nv_bfloat16* out, cudaStream_t stream) {
  const int64_t groups = rows * cols / 8;
  if (groups == 0 || cols % 32 != 0) return;
  launch_dependent(dequantize_kernel, static_cast<unsigned>((groups + 255) / 256), 256, 0, stream, codes, scales,
                   groups, out);
}

bool moe_gemv_fp4_supports(int64_t hidden, int64_t inter, int64_t top_k) {
  constexpr int64_t kShared = 48 * 1024;  // the input rows in shared memory, without opting in to more
  return hidden % 32 == 0 && inter % 32 == 0 && hidden * 2 <= kShared && top_k * inter * 2 <= kShared;
}

void moe_gemv_gate_up_fp4(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, float swiglu_limit,
                          __nv_bfloat16* act, cudaStream_t stream) {
  if (tokens == 0 || !moe_gemv_fp4_supports(hidden, inter, top_k)) return;  // the caller checks
  const int64_t acts_per_block = kWarps * kRowsPerWarp / 2;
  const dim3 grid(static_cast<unsigned>(tokens * top_k), static_cast<unsigned>((inter + acts_per_block - 1) / acts_per_block));
  const size_t shared = hidden * sizeof(__nv_bfloat16);
  if (swiglu_limit > 0.0f)
    launch_dependent(gate_up_kernel<true>, grid, kWarps * 32, shared, stream, x, ids, top_k, num_experts, hidden, inter,
                     gate_up, swiglu_limit, act);
  else
    launch_dependent(gate_up_kernel<false>, grid, kWarps * 32, shared, stream, x, ids, top_k, num_experts, hidden,
                     inter, gate_up, swiglu_limit, act);
}

void moe_gemv_down_fp4(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t tokens,
                       int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows down,
                       __nv_bfloat16* out, cudaStream_t stream) {
  if (tokens == 0 || !moe_gemv_fp4_supports(hidden, inter, top_k)) return;
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + rows_per_block - 1) / rows_per_block));
  const size_t shared = top_k * inter * sizeof(__nv_bfloat16);
  launch_dependent(down_kernel, grid, kWarps * 32, shared, stream, act, ids, weights, top_k, num_experts, hidden, inter,
                   down, out);
}

}  // namespace deepinfer::cuda
