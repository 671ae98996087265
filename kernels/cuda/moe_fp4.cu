#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// ---- The tensor-core forms (the default): a warp multiplies 16 weight rows at a time by the pair's input on the
// tensor cores (mma m16n8k16, fp16 operands, fp32 sums), so no lane spends instructions on products or on a
// shared-memory table. e2m1 codes become fp16 through e4m3, whose values the hardware converts two at a time:
// an e2m1 code s.e1e0.m is the e4m3 code s.0e1e0.m00 of its value times 2^-6 (subnormal e2m1 codes included), so
// eight codes take 6 bit operations, 2 byte permutes and 4 conversions. The input row goes to shared memory as
// fp16 times a power of two that puts its largest magnitude at 2^14..2^15 (exact for every value above 2^-10 of
// the largest; the product is scaled back), which fp16's range needs and bf16 activations do not guarantee.
// Each lane holds one 4-byte word (8 codes) of its rows' 16-byte scale blocks; the MMA's k order is permuted so
// that its fragments are exactly those words' bytes, the input read in the same permuted order.
constexpr int kMmaWarps = 4;
constexpr int kMmaTiles = 2;   // 16-row MMA tiles a warp keeps in flight
constexpr int kMmaUnroll = 4;  // scale blocks of 32 values whose loads a warp issues together

__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return static_cast<uint32_t>(raw.x) | (static_cast<uint32_t>(raw.y) << 16);
}

// Eight e2m1 codes (a word, the first in the low nibble) as four fp16 pairs of their values x 2^-6: pair i holds
// the two codes of byte i, its low nibble first.
__device__ __forceinline__ void e2m1x8_to_f16(uint32_t c, uint32_t (&h)[4]) {
  const uint32_t lo = ((c & 0x07070707u) << 2) | ((c & 0x08080808u) << 4);  // the low nibbles as e4m3
  const uint32_t hi = ((c >> 2) & 0x1c1c1c1cu) | (c & 0x80808080u);         // the high nibbles as e4m3
  const uint32_t p01 = __byte_perm(lo, hi, 0x5140), p23 = __byte_perm(lo, hi, 0x7362);
  h[0] = e4m3x2_to_f16x2(p01 & 0xffffu);
  h[1] = e4m3x2_to_f16x2(p01 >> 16);
  h[2] = e4m3x2_to_f16x2(p23 & 0xffffu);
  h[3] = e4m3x2_to_f16x2(p23 >> 16);
}

// A ue8m0 scale byte's value times 2^6 (the codes' fp16 form is their value x 2^-6).
__device__ __forceinline__ float scale_times_64(uint32_t byte) { return __uint_as_float((byte + 6u) << 23); }

__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The power of two that brings a row of largest magnitude `amax` to [2^14, 2^15) (1 for a zero row).
__device__ __forceinline__ float fp16_range_factor(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  int exponent;
  frexpf(amax, &exponent);  // amax = f 2^exponent, f in [0.5, 1)
  return ldexpf(1.0f, 15 - exponent);
}

// `n` bf16 values of `src` into `dst` as fp16 times `factor`, by the block.
__device__ __forceinline__ void stage_fp16(const __nv_bfloat16* src, int64_t n, float factor, __half* dst) {
  for (int64_t i = threadIdx.x; i < n / 2; i += blockDim.x) {
    const __nv_bfloat162 v = reinterpret_cast<const __nv_bfloat162*>(src)[i];
    reinterpret_cast<__half2*>(dst)[i] = __floats2half2_rn(__low2float(v) * factor, __high2float(v) * factor);
  }
}

// The largest magnitude of `n` bf16 values, by the block (every thread gets it; `partial` kMmaWarps floats).
__device__ __forceinline__ float block_amax(const __nv_bfloat16* src, int64_t n, float* partial) {
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) amax = fmaxf(amax, fabsf(to_float(src[i])));
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = partial[0];
  for (int w = 1; w < kMmaWarps; ++w) amax = fmaxf(amax, partial[w]);
  __syncthreads();  // partial may be reused
  return amax;
}

// sums[m][h] += (row pair (m, h) of this lane) . vec over n values, for kMmaTiles tiles whose rows g and g + 8 are
// rows[m][0] and rows[m][1] (g = lane / 4): column 0 of each tile's product, the scale blocks' scales applied per
// block. vec: fp16 in shared memory; every lane gets its rows' sums in sums (lanes with lane % 4 == 0 hold them).
__device__ __forceinline__ void mma_dot_rows(const Fp4Rows& w, const int64_t (&rows)[kMmaTiles][2], int n,
                                             const __half* vec, float weight, float (&sums)[kMmaTiles][2]) {
  const int lane = threadIdx.x % 32, q = lane & 3;
  const int blocks = n / 32;
  for (int b0 = 0; b0 < blocks; b0 += kMmaUnroll) {
    uint32_t codes[kMmaUnroll][kMmaTiles][2], scales[kMmaUnroll][kMmaTiles][2];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u)
#pragma unroll
      for (int m = 0; m < kMmaTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int b = b0 + u;
          codes[u][m][h] = b < blocks ? __ldg(reinterpret_cast<const uint32_t*>(w.codes + rows[m][h] * (n / 2) + b * 16 + 4 * q)) : 0u;
          scales[u][m][h] = b < blocks ? __ldg(w.scales + rows[m][h] * blocks + b) : 127u;
        }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int b = b0 + u;
      if (b >= blocks) break;
      const uint4 x = *reinterpret_cast<const uint4*>(vec + b * 32 + 8 * q);
#pragma unroll
      for (int m = 0; m < kMmaTiles; ++m) {
        uint32_t r0[4], r8[4];  // rows g and g + 8
        e2m1x8_to_f16(codes[u][m][0], r0);
        e2m1x8_to_f16(codes[u][m][1], r8);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_f16(d, r0[0], r8[0], r0[1], r8[1], x.x, x.y);
        mma_f16(d, r0[2], r8[2], r0[3], r8[3], x.z, x.w);
        sums[m][0] += d[0] * (scale_times_64(scales[u][m][0]) * weight);
        sums[m][1] += d[2] * (scale_times_64(scales[u][m][1]) * weight);
      }
    }
  }
}

// Block (pair p = (t, k), tile of kMmaWarps x kMmaTiles x 8 activations): each MMA tile 8 gate rows (rows g) and
// their 8 up rows (rows g + 8), so a lane holds both halves of its activation.
template <bool kClamp>
__global__ void __launch_bounds__(kMmaWarps * 32)
    gate_up_mma_kernel(const __nv_bfloat16* x, const int32_t* ids, int64_t top_k, int64_t num_experts,
                       int64_t hidden, int64_t inter, Fp4Rows w, float swiglu_limit, __nv_bfloat16* act) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __half xh[];  // [hidden]
  __shared__ float partial[kMmaWarps];
  const int64_t pair = blockIdx.x, t = pair / top_k;
  const float factor = fp16_range_factor(block_amax(x + t * hidden, hidden, partial));
  stage_fp16(x + t * hidden, hidden, factor, xh);
  __syncthreads();
  const int lane = threadIdx.x % 32, g = lane >> 2;
  constexpr int kActs = 8 * kMmaTiles;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kMmaWarps + threadIdx.x / 32) * kActs;
  if (first >= inter) return;
  const int64_t e = ids[pair];
  if (e >= num_experts) {  // another rank's: zeros
    if (lane < kActs && first + lane < inter) act[pair * inter + first + lane] = to_bf16(0.0f);
    return;
  }
  int64_t rows[kMmaTiles][2];
#pragma unroll
  for (int m = 0; m < kMmaTiles; ++m) {
    const int64_t j = min(first + 8 * m + g, inter - 1);  // past inter: the last row again, its sums unused
    rows[m][0] = e * 2 * inter + j;
    rows[m][1] = e * 2 * inter + inter + j;
  }
  float sums[kMmaTiles][2] = {};
  mma_dot_rows(w, rows, static_cast<int>(hidden), xh, 1.0f / factor, sums);
  if (lane % 4 != 0) return;
#pragma unroll
  for (int m = 0; m < kMmaTiles; ++m) {
    const int64_t j = first + 8 * m + g;
    if (j >= inter) continue;
    float gate = sums[m][0], up = sums[m][1];
    if constexpr (kClamp) clamp_swiglu(gate, up, swiglu_limit);
    act[pair * inter + j] = to_bf16(gate / (1.0f + expf(-gate)) * up);
  }
}

// Block (token t, tile of kMmaWarps x kMmaTiles x 16 hidden rows): every k of the token, summed in k order.
__global__ void __launch_bounds__(kMmaWarps * 32)
    down_mma_kernel(const __nv_bfloat16* act, const int32_t* ids, const float* weights, int64_t top_k,
                    int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows w, __nv_bfloat16* out) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __half ah[];  // [top_k, inter]
  __shared__ float partial[kMmaWarps];
  __shared__ float factors[kMoeFp4MaxTopK];
  const int64_t t = blockIdx.x;
  for (int64_t k = 0; k < top_k; ++k) {
    const __nv_bfloat16* row = act + (t * top_k + k) * inter;
    const float factor = fp16_range_factor(block_amax(row, inter, partial));
    if (threadIdx.x == 0) factors[k] = factor;
    stage_fp16(row, inter, factor, ah + k * inter);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, g = lane >> 2;
  constexpr int kRows = 16 * kMmaTiles;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kMmaWarps + threadIdx.x / 32) * kRows;
  if (first >= hidden) return;
  float sums[kMmaTiles][2] = {};
  for (int64_t k = 0; k < top_k; ++k) {
    const int64_t e = ids[t * top_k + k];
    if (e >= num_experts) continue;
    int64_t rows[kMmaTiles][2];
#pragma unroll
    for (int m = 0; m < kMmaTiles; ++m) {
      rows[m][0] = e * hidden + min(first + 16 * m + g, hidden - 1);
      rows[m][1] = e * hidden + min(first + 16 * m + 8 + g, hidden - 1);
    }
    mma_dot_rows(w, rows, static_cast<int>(inter), ah + k * inter, weights[t * top_k + k] / factors[k], sums);
  }
  if (lane % 4 != 0) return;
#pragma unroll
  for (int m = 0; m < kMmaTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = first + 16 * m + 8 * h + g;
      if (r < hidden) out[t * hidden + r] = to_bf16(to_float(out[t * hidden + r]) + sums[m][h]);
    }
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
  return hidden % 32 == 0 && inter % 32 == 0 && hidden * 2 <= kShared && top_k * inter * 2 <= kShared &&
         top_k <= kMoeFp4MaxTopK;
}

void moe_gemv_gate_up_fp4(const __nv_bfloat16* x, const int32_t* ids, int64_t tokens, int64_t top_k,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, float swiglu_limit,
                          __nv_bfloat16* act, cudaStream_t stream, Fp4GemvForm form) {
  if (tokens == 0 || !moe_gemv_fp4_supports(hidden, inter, top_k)) return;  // the caller checks
  if (form == Fp4GemvForm::kTensorCores) {
    constexpr int64_t acts_per_block = kMmaWarps * kMmaTiles * 8;
    const dim3 grid(static_cast<unsigned>(tokens * top_k), static_cast<unsigned>((inter + acts_per_block - 1) / acts_per_block));
    const size_t shared = hidden * sizeof(__half);
    auto kernel = swiglu_limit > 0.0f ? gate_up_mma_kernel<true> : gate_up_mma_kernel<false>;
    launch_dependent(kernel, grid, kMmaWarps * 32, shared, stream, x, ids, top_k, num_experts, hidden, inter, gate_up,
                     swiglu_limit, act);
    return;
  }
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
                       __nv_bfloat16* out, cudaStream_t stream, Fp4GemvForm form) {
  if (tokens == 0 || !moe_gemv_fp4_supports(hidden, inter, top_k)) return;
  if (form == Fp4GemvForm::kTensorCores) {
    constexpr int64_t rows_per_block = kMmaWarps * kMmaTiles * 16;
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + rows_per_block - 1) / rows_per_block));
    launch_dependent(down_mma_kernel, grid, kMmaWarps * 32, top_k * inter * sizeof(__half), stream, act, ids, weights,
                     top_k, num_experts, hidden, inter, down, out);
    return;
  }
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden + rows_per_block - 1) / rows_per_block));
  const size_t shared = top_k * inter * sizeof(__nv_bfloat16);
  launch_dependent(down_kernel, grid, kWarps * 32, shared, stream, act, ids, weights, top_k, num_experts, hidden, inter,
                   down, out);
}

}  // namespace deepinfer::cuda
