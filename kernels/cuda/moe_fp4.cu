#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/grouped_expert_launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/fp_formats.h"

namespace deepinfer::cuda {

namespace {

// Shared memory a grouped kernel's inputs may take (opting in past 48 KB; the H200 allows 227 KB a block).
constexpr int64_t kGroupedMaxShared = 96 * 1024;
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

// The warp's dot products of kRowsPerWarp FP4 rows of `n` values with `count` (at most kVecs) bf16 vectors in
// shared memory, `stride` values apart. Lane L takes values [s + 8L, s + 8L + 8) of each step s (its scale byte:
// block (s + 8L) / 32); the loads of kUnroll steps of every row are issued before their products (more bytes in
// flight a warp), which adds in the same order as one step at a time. Each vector's sums are added in the same
// order whatever kVecs and count are, so one vector's products have the same bits alone or beside others.
template <int kVecs>
__device__ __forceinline__ void dot_rows(const Fp4Rows& w, const int64_t (&rows)[kRowsPerWarp], int n,
                                         const __nv_bfloat16* vecs, int stride, int count, const uint32_t* table,
                                         float (&sums)[kVecs][kRowsPerWarp]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int v = 0; v < kVecs; ++v)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) sums[v][r] = 0.0f;
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
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        if (v >= count) break;
        const uint4 x = *reinterpret_cast<const uint4*>(vecs + v * stride + i);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
          sums[v][r] += dot8_fp4(codes[u][r], ue8m0_scale(static_cast<uint8_t>(scale_bytes[u][r])), x, table);
      }
    }
  }
#pragma unroll
  for (int v = 0; v < kVecs; ++v)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) sums[v][r] = warp_sum(sums[v][r]);
}

// A warp's weight rows for the activations [first, first + kRowsPerWarp / 2) of expert e: their gate rows, then
// their up rows (a row past inter repeats the last); returns how many of the activations exist.
__device__ __forceinline__ int gate_up_rows(int64_t e, int64_t first, int64_t inter, int64_t (&rows)[kRowsPerWarp]) {
  constexpr int kActs = kRowsPerWarp / 2;
  const int acts = static_cast<int>(inter - first < kActs ? inter - first : kActs);
  for (int a = 0; a < kActs; ++a) {
    const int64_t j = first + (a < acts ? a : acts - 1);
    rows[a] = e * 2 * inter + j;
    rows[kActs + a] = e * 2 * inter + inter + j;
  }
  return acts;
}

template <bool kClamp>
__device__ __forceinline__ __nv_bfloat16 swiglu(float g, float u, float swiglu_limit) {
  if constexpr (kClamp) clamp_swiglu(g, u, swiglu_limit);
  return to_bf16(g / (1.0f + expf(-g)) * u);
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
  int64_t rows[kRowsPerWarp];
  const int acts = gate_up_rows(e, first, inter, rows);
  float sums[1][kRowsPerWarp];
  dot_rows<1>(w, rows, static_cast<int>(hidden), xs, 0, 1, table, sums);
  if (threadIdx.x % 32 != 0) return;
  for (int a = 0; a < acts; ++a) act[pair * inter + first + a] = swiglu<kClamp>(sums[0][a], sums[0][kActs + a], swiglu_limit);
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
    float sums[1][kRowsPerWarp];
    dot_rows<1>(w, row_ids, static_cast<int>(inter), as + k * inter, 0, 1, table, sums);
    const float weight = weights[t * top_k + k];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) total[r] = fmaf(weight, sums[0][r], total[r]);
  }
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < rows; ++r) out[t * hidden + first + r] = to_bf16(to_float(out[t * hidden + first + r]) + total[r]);
}

// The grouped forms: the pairs sorted by expert (moe_route: expert e's permuted rows [offsets[e], offsets[e + 1]),
// row r standing for token token_of_row[r]), a block per (expert, tile of weight rows), so that an expert's
// weights are streamed once for all its pairs (the per-pair kernels above stream them once a pair). The block's
// tile is kGroupedPasses passes of its warps' rows, and its inputs sit in shared memory kGroupedVecs rows at a time
// (four: 128 registers a thread, two blocks an SM); an expert of more pairs takes each pass's rows over all its
// chunks of inputs before the next pass, so that the rows read again come from the caches.
constexpr int kGroupedVecs = 4;
constexpr int kGroupedPasses = 4;

// Block (expert e, tile of kWarps * kActs * kGroupedPasses activations): act_perm[r, j] for e's rows r.
template <bool kClamp>
__global__ void __launch_bounds__(kWarps * 32, 2)
    grouped_gate_up_kernel(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                           int64_t hidden, int64_t inter, Fp4Rows w, float swiglu_limit, __nv_bfloat16* act_perm) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [kGroupedVecs, hidden]
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  constexpr int kActs = kRowsPerWarp / 2;
  const int64_t e = blockIdx.x;
  const int begin = offsets[e], end = offsets[e + 1];
  const int chunks = (end - begin + kGroupedVecs - 1) / kGroupedVecs;
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * kWarps * kActs * kGroupedPasses;
  for (int pass = 0; pass < kGroupedPasses; ++pass) {
    const int64_t first = tile + (static_cast<int64_t>(pass) * kWarps + threadIdx.x / 32) * kActs;
    if (tile + static_cast<int64_t>(pass) * kWarps * kActs >= inter) break;  // (the same for the whole block)
    for (int c = 0; c < chunks; ++c) {
      const int chunk = begin + c * kGroupedVecs;
      const int count = end - chunk < kGroupedVecs ? end - chunk : kGroupedVecs;
      if (chunks > 1 || pass == 0)
        load_chunk(x, [&](int64_t v) { return static_cast<int64_t>(token_of_row[chunk + v]); }, count, hidden, hidden,
                   xs);
      if (first >= inter) continue;
      int64_t rows[kRowsPerWarp];
      const int acts = gate_up_rows(e, first, inter, rows);
      float sums[kGroupedVecs][kRowsPerWarp];
      dot_rows<kGroupedVecs>(w, rows, static_cast<int>(hidden), xs, static_cast<int>(hidden), count, table, sums);
      if (threadIdx.x % 32 != 0) continue;
#pragma unroll
      for (int v = 0; v < kGroupedVecs; ++v) {
        if (v >= count) break;
#pragma unroll
        for (int a = 0; a < kActs; ++a)
          if (a < acts)
            act_perm[(chunk + v) * inter + first + a] = swiglu<kClamp>(sums[v][a], sums[v][kActs + a], swiglu_limit);
      }
    }
  }
}

// Block (expert e, tile of kWarps * kRowsPerWarp * kGroupedPasses hidden rows): y_perm[r, i] = W_down[e] . act_perm[r]
// for e's rows r, unrounded (the combine below adds them as the per-pair down kernel adds its sums).
__global__ void __launch_bounds__(kWarps * 32, 2)
    grouped_down_kernel(const __nv_bfloat16* act_perm, const int32_t* offsets, int64_t hidden, int64_t inter,
                        Fp4Rows w, float* y_perm) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [kGroupedVecs, inter]
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  const int64_t e = blockIdx.x;
  const int begin = offsets[e], end = offsets[e + 1];
  const int chunks = (end - begin + kGroupedVecs - 1) / kGroupedVecs;
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * kWarps * kRowsPerWarp * kGroupedPasses;
  for (int pass = 0; pass < kGroupedPasses; ++pass) {
    const int64_t first = tile + (static_cast<int64_t>(pass) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
    if (tile + static_cast<int64_t>(pass) * kWarps * kRowsPerWarp >= hidden) break;
    for (int c = 0; c < chunks; ++c) {
      const int chunk = begin + c * kGroupedVecs;
      const int count = end - chunk < kGroupedVecs ? end - chunk : kGroupedVecs;
      if (chunks > 1 || pass == 0) load_chunk(act_perm, [&](int64_t v) { return chunk + v; }, count, inter, inter, as);
      if (first >= hidden) continue;
      const int rows = static_cast<int>(hidden - first < kRowsPerWarp ? hidden - first : kRowsPerWarp);
      int64_t row_ids[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) row_ids[r] = e * hidden + first + (r < rows ? r : rows - 1);
      float sums[kGroupedVecs][kRowsPerWarp];
      dot_rows<kGroupedVecs>(w, row_ids, static_cast<int>(inter), as, static_cast<int>(inter), count, table, sums);
      if (threadIdx.x % 32 != 0) continue;
#pragma unroll
      for (int v = 0; v < kGroupedVecs; ++v) {
        if (v >= count) break;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
          if (r < rows) y_perm[(chunk + v) * hidden + first + r] = sums[v][r];
      }
    }
  }
}

// The grouped forms on the tensor cores, for experts of more pairs: a warp multiplies 16 of the expert's weight rows
// (decoded to bf16 in registers: e2m1 values times their power-of-two scale, exact) by up to kMmaVecs of its pairs'
// inputs at a time (mma.m16n8k16 with fp32 sums), so an expert is streamed once for every kMmaVecs pairs and a
// product costs a fraction of an instruction. The MMA adds in its own order: not the per-pair kernels' bits.
// A lane (g = lane / 4, t = lane % 4) takes, of each 128-value segment of k, 16 bytes of codes of each of its two rows
// (values 32t..32t+31: one scale block) and the same values of input g; in the m-th of the segment's 8 MMAs its k
// slots 2t, 2t+1 stand for values 32t + 4m, +1 (code byte 2m) and slots 2t+8, 2t+9 for 32t + 4m + 2, +3 (byte 2m + 1),
// the same for A and B (a dot product may take its terms in any order).
constexpr int kMmaVecs = 8;     // the MMA's n: pairs a chunk
constexpr int kMmaPad = 32;     // bf16 after each input row in shared memory (rows 64 bytes apart in the banks)
constexpr int kMmaUnroll = 4;   // segments whose loads a warp issues together
constexpr int kMmaSegment = 128;
// Blocks an expert's chunks are dealt to (chunk c to block z = c % kMmaSplits): an expert that took many of the step's
// pairs (routing is seldom uniform) is not left to one block while the others have finished.
constexpr int kMmaSplits = 4;
constexpr int64_t kMmaMaxShared = 100 * 1024;

// acc = the 16 x kMmaVecs products of weight rows (row_a + [0, 8): A rows 0-7, row_b + [0, 8): A rows 8-15; this
// lane's rows row_a + g and row_b + g) with the inputs vecs[v * stride, ...], v < count (the other columns are
// left zero); k values a row, a multiple of 128. This lane's sums: acc[0..1] row_a + g, acc[2..3] row_b + g, for
// inputs 2t and 2t + 1.
__device__ __forceinline__ void mma_rows(const Fp4Rows& w, int64_t row_a, int64_t row_b, int k,
                                         const __nv_bfloat16* vecs, int stride, int count, const uint32_t* table,
                                         float (&acc)[4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
  const uint8_t* codes_a = w.codes + (row_a + g) * (k / 2) + 16 * t;
  const uint8_t* codes_b = w.codes + (row_b + g) * (k / 2) + 16 * t;
  const uint8_t* scales_a = w.scales + (row_a + g) * (k / 32) + t;
  const uint8_t* scales_b = w.scales + (row_b + g) * (k / 32) + t;
  const __nv_bfloat16* vec = vecs + g * stride + 32 * t;
  const bool has_vec = g < count;
  for (int s = 0; s < k; s += kMmaSegment * kMmaUnroll) {
    uint4 ca[kMmaUnroll], cb[kMmaUnroll];
    uint32_t sa[kMmaUnroll], sb[kMmaUnroll];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int seg = s + kMmaSegment * u;
      const bool in = seg < k;
      ca[u] = in ? __ldg(reinterpret_cast<const uint4*>(codes_a + seg / 2)) : make_uint4(0, 0, 0, 0);
      cb[u] = in ? __ldg(reinterpret_cast<const uint4*>(codes_b + seg / 2)) : make_uint4(0, 0, 0, 0);
      sa[u] = in ? __ldg(scales_a + seg / 32) : 127u;
      sb[u] = in ? __ldg(scales_b + seg / 32) : 127u;
    }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int seg = s + kMmaSegment * u;
      if (seg >= k) break;
      uint32_t xw[16];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 x = has_vec ? *reinterpret_cast<const uint4*>(vec + seg + 8 * q) : make_uint4(0, 0, 0, 0);
        xw[4 * q] = x.x, xw[4 * q + 1] = x.y, xw[4 * q + 2] = x.z, xw[4 * q + 3] = x.w;
      }
      const float va = ue8m0_scale(static_cast<uint8_t>(sa[u])), vb = ue8m0_scale(static_cast<uint8_t>(sb[u]));
      const __nv_bfloat162 scale_a = __floats2bfloat162_rn(va, va), scale_b = __floats2bfloat162_rn(vb, vb);
      const uint32_t wa[4] = {ca[u].x, ca[u].y, ca[u].z, ca[u].w}, wb[4] = {cb[u].x, cb[u].y, cb[u].z, cb[u].w};
      const auto decode = [&](uint32_t word, int byte, __nv_bfloat162 sc) {
        uint32_t pair = table[(word >> (8 * byte)) & 0xffu];
        const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair), sc);  // exact
        return *reinterpret_cast<const uint32_t*>(&v);
      };
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const uint32_t word_a = wa[m / 2], word_b = wb[m / 2];
        const int lo = 2 * (m % 2), hi = lo + 1;  // code bytes 2m and 2m + 1 of the lane's 16
        mma_bf16(acc, decode(word_a, lo, scale_a), decode(word_b, lo, scale_b), decode(word_a, hi, scale_a),
                 decode(word_b, hi, scale_b), xw[2 * m], xw[2 * m + 1]);
      }
    }
  }
}

// Block (expert e, kWarps * 8 activations, split z): each warp the gate rows (A rows 0-7) and up rows (8-15) of 8
// activations; act_perm[r, j] for e's rows r in chunks z, z + kMmaSplits, ... of kMmaVecs.
template <bool kClamp>
__global__ void __launch_bounds__(kWarps * 32)
    mma_gate_up_kernel(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets, int64_t hidden,
                       int64_t inter, Fp4Rows w, float swiglu_limit, __nv_bfloat16* act_perm) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [kMmaVecs, hidden + kMmaPad]
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t e = blockIdx.x, stride = hidden + kMmaPad;
  const int begin = offsets[e], end = offsets[e + 1];
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * 8;  // the warp's activations
  const int64_t last = inter - 1;  // (rows past inter repeat the last; not stored)
  for (int chunk = begin + static_cast<int>(blockIdx.z) * kMmaVecs; chunk < end; chunk += kMmaVecs * kMmaSplits) {
    const int count = end - chunk < kMmaVecs ? end - chunk : kMmaVecs;
    load_chunk(x, [&](int64_t v) { return static_cast<int64_t>(token_of_row[chunk + v]); }, count, hidden, stride, xs);
    if (first >= inter) continue;
    const int64_t j = first + g < inter ? first + g : last;
    float acc[4];
    // (mma_rows offsets its rows by g itself: pass the warp's first gate and up rows, clamped per lane below)
    mma_rows(w, e * 2 * inter + j - g, e * 2 * inter + inter + j - g, static_cast<int>(hidden), xs,
             static_cast<int>(stride), count, table, acc);
    if (first + g >= inter) continue;
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (2 * t + i < count)
        act_perm[(chunk + 2 * t + i) * inter + first + g] = swiglu<kClamp>(acc[i], acc[2 + i], swiglu_limit);
  }
}

// Block (expert e, kWarps * 16 hidden rows, split z): y_perm[r, i] = W_down[e] . act_perm[r] for e's rows r in
// chunks z, z + kMmaSplits, ..., unrounded.
__global__ void __launch_bounds__(kWarps * 32)
    mma_down_kernel(const __nv_bfloat16* act_perm, const int32_t* offsets, int64_t hidden, int64_t inter, Fp4Rows w,
                    float* y_perm) {
  begin_dependent_kernel();
  extern __shared__ __align__(16) __nv_bfloat16 as[];  // [kMmaVecs, inter + kMmaPad]
  __shared__ uint32_t table[256];
  fill_byte_table(table);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t e = blockIdx.x, stride = inter + kMmaPad;
  const int begin = offsets[e], end = offsets[e + 1];
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32) * 16;  // the warp's rows
  for (int chunk = begin + static_cast<int>(blockIdx.z) * kMmaVecs; chunk < end; chunk += kMmaVecs * kMmaSplits) {
    const int count = end - chunk < kMmaVecs ? end - chunk : kMmaVecs;
    load_chunk(act_perm, [&](int64_t v) { return chunk + v; }, count, inter, stride, as);
    if (first >= hidden) continue;
    // Rows past hidden repeat the last (not stored): each lane's two rows clamped.
    const int64_t ra = first + g < hidden ? first + g : hidden - 1, rb = first + 8 + g < hidden ? first + 8 + g : hidden - 1;
    float acc[4];
    mma_rows(w, e * hidden + ra - g, e * hidden + rb - g, static_cast<int>(inter), as, static_cast<int>(stride), count,
             table, acc);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (2 * t + i >= count) continue;
      float* y = y_perm + (chunk + 2 * t + i) * hidden;
      if (first + g < hidden) y[first + g] = acc[i];
      if (first + 8 + g < hidden) y[first + 8 + g] = acc[2 + i];
    }
  }
}

// A thread per (token, hidden index): out[t, i] = bf16(out[t, i] + sum over k in order of weights[t, k] * y_perm[row
// of (t, k), i]), the pairs served elsewhere (ids >= num_experts) skipped: the per-pair down kernel's sum.
__global__ void grouped_combine_kernel(const float* y_perm, const int32_t* ids, const int32_t* row_of,
                                       const float* weights, int64_t tokens, int64_t top_k, int64_t num_experts,
                                       int64_t hidden, __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= tokens * hidden) return;
  const int64_t t = g / hidden, i = g % hidden;
  float total = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) {
    if (ids[t * top_k + k] >= num_experts) continue;
    total = fmaf(weights[t * top_k + k], y_perm[row_of[t * top_k + k] * hidden + i], total);
  }
  out[g] = to_bf16(to_float(out[g]) + total);
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

bool moe_grouped_gemv_fp4_supports(int64_t hidden, int64_t inter) {
  return hidden % 32 == 0 && inter % 32 == 0 &&
         kGroupedVecs * std::max(hidden, inter) * static_cast<int64_t>(sizeof(__nv_bfloat16)) <= kGroupedMaxShared;
}

void moe_grouped_gemv_fp4(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                          int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, Fp4Rows down,
                          float swiglu_limit, __nv_bfloat16* act_perm, float* y_perm, cudaStream_t stream) {
  if (num_experts == 0 || !moe_grouped_gemv_fp4_supports(hidden, inter)) return;  // the caller checks
  const auto gate_up_kernel = swiglu_limit > 0.0f ? grouped_gate_up_kernel<true> : grouped_gate_up_kernel<false>;
  launch_grouped_experts(gate_up_kernel, grouped_down_kernel, kWarps * kRowsPerWarp / 2 * kGroupedPasses,
                         kWarps * kRowsPerWarp * kGroupedPasses, kGroupedVecs, kWarps * 32, x, token_of_row, offsets,
                         num_experts, hidden, inter, gate_up, down, swiglu_limit, act_perm, y_perm, stream);
}

bool moe_grouped_mma_fp4_supports(int64_t hidden, int64_t inter) {
  return hidden % kMmaSegment == 0 && inter % kMmaSegment == 0 &&
         kMmaVecs * (std::max(hidden, inter) + kMmaPad) * static_cast<int64_t>(sizeof(__nv_bfloat16)) <= kMmaMaxShared;
}

void moe_grouped_mma_fp4(const __nv_bfloat16* x, const int32_t* token_of_row, const int32_t* offsets,
                         int64_t num_experts, int64_t hidden, int64_t inter, Fp4Rows gate_up, Fp4Rows down,
                         float swiglu_limit, __nv_bfloat16* act_perm, float* y_perm, cudaStream_t stream) {
  if (num_experts == 0 || !moe_grouped_mma_fp4_supports(hidden, inter)) return;  // the caller checks
  const size_t gate_up_shared = kMmaVecs * (hidden + kMmaPad) * sizeof(__nv_bfloat16);
  const dim3 gate_up_grid(static_cast<unsigned>(num_experts), static_cast<unsigned>((inter + kWarps * 8 - 1) / (kWarps * 8)),
                          kMmaSplits);
  const auto gate_up_kernel = swiglu_limit > 0.0f ? mma_gate_up_kernel<true> : mma_gate_up_kernel<false>;
  cudaFuncSetAttribute(gate_up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(gate_up_shared));
  launch_dependent(gate_up_kernel, gate_up_grid, kWarps * 32, gate_up_shared, stream, x, token_of_row, offsets, hidden,
                   inter, gate_up, swiglu_limit, act_perm);
  const size_t down_shared = kMmaVecs * (inter + kMmaPad) * sizeof(__nv_bfloat16);
  const dim3 down_grid(static_cast<unsigned>(num_experts), static_cast<unsigned>((hidden + kWarps * 16 - 1) / (kWarps * 16)),
                       kMmaSplits);
  cudaFuncSetAttribute(mma_down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(down_shared));
  launch_dependent(mma_down_kernel, down_grid, kWarps * 32, down_shared, stream, act_perm, offsets, hidden, inter, down,
                   y_perm);
}

void moe_grouped_combine(const float* y_perm, const int32_t* ids, const int32_t* row_of, const float* weights,
                         int64_t tokens, int64_t top_k, int64_t num_experts, int64_t hidden, __nv_bfloat16* out,
                         cudaStream_t stream) {
  const int64_t values = tokens * hidden;
  if (values == 0) return;
  launch_dependent(grouped_combine_kernel, static_cast<unsigned>((values + 255) / 256), 256, 0, stream, y_perm, ids,
                   row_of, weights, tokens, top_k, num_experts, hidden, out);
}

}  // namespace deepinfer::cuda
