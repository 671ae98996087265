#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/fp_formats.h"
#include "kernels/group_slots.h"

namespace deepinfer::cuda {

namespace {

__global__ void write_kernel(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t dim,
                             __nv_bfloat16* cache, int64_t cache_stride) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  if (slots[t] < 0) return;  // a padding row
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) cache[slots[t] * cache_stride + i] = src[t * src_stride + i];
}

__global__ void gather_kernel(const __nv_bfloat16* cache, const int64_t* slots, int64_t dim, __nv_bfloat16* out) {
  begin_dependent_kernel();  // launched with launch_dependent (launch.cuh)
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = cache[slots[t] * dim + i];
}

__global__ void gather_groups_kernel(const __nv_bfloat16* entries, int64_t dim, const int32_t* block_tables,
                                     int64_t max_blocks, int64_t ratio, const int32_t* counts, const int64_t* offsets,
                                     bool zero_padding, __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int64_t g = blockIdx.x, s = blockIdx.y;
  __nv_bfloat16* row = out + (offsets[s] + g) * dim;
  if (g >= counts[s]) {
    if (zero_padding)
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = to_bf16(0.0f);
    return;
  }
  const __nv_bfloat16* src = entries + group_slot(block_tables + s * max_blocks, ratio, g) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = src[i];
}

// A thread per block of FP4 values: the scale fake_quant_fp4 picks, the codes two a byte.
__global__ void write_fp4_kernel(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots,
                                 int64_t num_blocks, int64_t blocks_per_row, int64_t block, bool e4m3_scales,
                                 uint8_t* codes, uint8_t* scales) {
  begin_dependent_kernel();
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= num_blocks) return;
  const int64_t t = b / blocks_per_row, part = b % blocks_per_row, dim = blocks_per_row * block;
  const int64_t slot = slots[t];
  if (slot < 0) return;  // a padding row
  const __nv_bfloat16* x = src + t * src_stride + part * block;
  float amax = 0.0f;
  for (int64_t i = 0; i < block; ++i) amax = fmaxf(amax, fabsf(to_float(x[i])));
  const float scale = fp4_block_scale(amax, e4m3_scales);
  uint8_t* out = codes + slot * (dim / 2) + part * (block / 2);
  for (int64_t i = 0; i < block; i += 2)
    out[i / 2] = static_cast<uint8_t>(e2m1_code_signed(to_float(x[i]) / scale) |
                                      (e2m1_code_signed(to_float(x[i + 1]) / scale) << 4));
  scales[slot * blocks_per_row + part] = static_cast<uint8_t>(fp4_scale_byte(scale, e4m3_scales));
}

// A block per (group g, sequence s), a thread per code byte (two values).
__global__ void gather_fp4_groups_kernel(const uint8_t* codes, const uint8_t* scales, int64_t dim, int64_t block,
                                         bool e4m3_scales, const int32_t* block_tables, int64_t max_blocks,
                                         int64_t ratio, const int32_t* counts, const int64_t* offsets,
                                         bool zero_padding, __nv_bfloat16* out) {
  begin_dependent_kernel();
  const int64_t g = blockIdx.x, s = blockIdx.y;
  auto* row = reinterpret_cast<__nv_bfloat162*>(out + (offsets[s] + g) * dim);
  if (g >= counts[s]) {
    if (zero_padding)
      for (int64_t i = threadIdx.x; i < dim / 2; i += blockDim.x) row[i] = __floats2bfloat162_rn(0.0f, 0.0f);
    return;
  }
  const int64_t slot = group_slot(block_tables + s * max_blocks, ratio, g);
  const uint8_t* in = codes + slot * (dim / 2);
  const uint8_t* scale_bytes = scales + slot * (dim / block);
  for (int64_t i = threadIdx.x; i < dim / 2; i += blockDim.x) {
    const float scale = fp4_scale_value(scale_bytes[2 * i / block], e4m3_scales);
    const uint32_t byte = in[i];
    row[i] = __floats2bfloat162_rn(e2m1_value(byte & 15u) * scale, e2m1_value(byte >> 4) * scale);
  }
}

constexpr int kFp8Block = 32;  // values per scale byte
constexpr int kFp8Threads = 128;

// A thread per block of 32 values: its largest magnitude, the power-of-two scale, 32 codes as two 16-byte stores.
__global__ void __launch_bounds__(kFp8Threads) write_fp8_kernel(const __nv_bfloat16* src, int64_t src_stride,
                                                                const int64_t* slots, int64_t num_blocks,
                                                                int64_t blocks_per_row, uint8_t* codes,
                                                                uint8_t* scales, bool exact_fit) {
  begin_dependent_kernel();
  const int64_t b = blockIdx.x * static_cast<int64_t>(kFp8Threads) + threadIdx.x;
  if (b >= num_blocks) return;
  const int64_t t = b / blocks_per_row, part = b % blocks_per_row, dim = blocks_per_row * kFp8Block;
  const __nv_bfloat16* x = src + t * src_stride + part * kFp8Block;
  float v[kFp8Block], amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kFp8Block; ++i) amax = fmaxf(amax, fabsf(v[i] = to_float(x[i])));
  const float scale = exact_fit ? ue8m0_value(fp8_weight_scale_byte(amax)) : fp8_block_scale(amax);
  uint32_t words[kFp8Block / 4];
#pragma unroll
  for (int w = 0; w < kFp8Block / 4; ++w) {
    words[w] = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float q = v[4 * w + i] / scale;  // exact: a power-of-two scale
      words[w] |= e4m3_code(q < -448.0f ? -448.0f : q > 448.0f ? 448.0f : q) << (8 * i);
    }
  }
  const int64_t slot = slots[t];
  auto* out = reinterpret_cast<uint4*>(codes + slot * dim + part * kFp8Block);
  out[0] = make_uint4(words[0], words[1], words[2], words[3]);
  out[1] = make_uint4(words[4], words[5], words[6], words[7]);
  scales[slot * blocks_per_row + part] = static_cast<uint8_t>(ilogbf(scale) + 127);
}

template <class Slot>
__global__ void __launch_bounds__(kFp8Threads) gather_fp8_kernel(const uint8_t* codes, const uint8_t* scales,
                                                                 const Slot* slots, int64_t num_blocks,
                                                                 int64_t blocks_per_row, __nv_bfloat16* out,
                                                                 int64_t out_stride) {
  begin_dependent_kernel();
  const int64_t b = blockIdx.x * static_cast<int64_t>(kFp8Threads) + threadIdx.x;
  if (b >= num_blocks) return;
  const int64_t t = b / blocks_per_row, part = b % blocks_per_row, dim = blocks_per_row * kFp8Block;
  const int64_t slot = static_cast<int64_t>(slots[t]);
  const auto* in = reinterpret_cast<const uint4*>(codes + slot * dim + part * kFp8Block);
  const float scale = ue8m0_to_float(scales[slot * blocks_per_row + part]);
  auto* dst = reinterpret_cast<uint4*>(out + t * out_stride + part * kFp8Block);
  for (int half = 0; half < 2; ++half) {
    uint4 values[2];
    e4m3x16_to_bf16(in[half], scale, values);
    dst[2 * half] = values[0];
    dst[2 * half + 1] = values[1];
  }
}

}  // namespace

void write_fp8_kv_rows(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens,
                       int64_t dim, uint8_t* codes, uint8_t* scales, cudaStream_t stream, Fp8Scales rule) {
  if (num_tokens == 0 || dim % kFp8Block != 0) return;  // the model checks dim
  const int64_t num_blocks = num_tokens * (dim / kFp8Block);
  launch_dependent(write_fp8_kernel, static_cast<unsigned>((num_blocks + kFp8Threads - 1) / kFp8Threads), kFp8Threads,
                   0, stream, src, src_stride, slots, num_blocks, dim / kFp8Block, codes, scales,
                   rule == Fp8Scales::kExactFit);
}

namespace {

template <class Slot>
void gather_fp8(const uint8_t* codes, const uint8_t* scales, const Slot* slots, int64_t num_tokens, int64_t dim,
                __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream) {
  if (num_tokens == 0 || dim % kFp8Block != 0) return;
  const int64_t num_blocks = num_tokens * (dim / kFp8Block);
  launch_dependent(gather_fp8_kernel<Slot>, static_cast<unsigned>((num_blocks + kFp8Threads - 1) / kFp8Threads),
                   kFp8Threads, 0, stream, codes, scales, slots, num_blocks, dim / kFp8Block, out, out_stride);
}

}  // namespace

void gather_fp8_kv_rows(const uint8_t* codes, const uint8_t* scales, const int64_t* slots, int64_t num_tokens,
                        int64_t dim, __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream) {
  gather_fp8(codes, scales, slots, num_tokens, dim, out, out_stride, stream);
}

void gather_fp8_kv_rows(const uint8_t* codes, const uint8_t* scales, const int32_t* slots, int64_t num_tokens,
                        int64_t dim, __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream) {
  gather_fp8(codes, scales, slots, num_tokens, dim, out, out_stride, stream);
}

void gather_group_entries(const __nv_bfloat16* entries, int64_t dim, const int32_t* block_tables, int64_t max_blocks,
                          int64_t ratio, const int32_t* counts, const int64_t* offsets, int64_t sequences,
                          int64_t width, bool zero_padding, __nv_bfloat16* out, cudaStream_t stream) {
  if (sequences == 0 || width == 0) return;
  launch_dependent(gather_groups_kernel, dim3(static_cast<unsigned>(width), static_cast<unsigned>(sequences)), 128, 0,
                   stream, entries, dim, block_tables, max_blocks, ratio, counts, offsets, zero_padding, out);
}

void write_fp4_rows(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_rows,
                    int64_t dim, Fp4Format format, uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  if (num_rows == 0 || dim % format.block != 0 || format.block % 2 != 0) return;  // the model checks dim
  const int64_t blocks_per_row = dim / format.block, num_blocks = num_rows * blocks_per_row;
  launch_dependent(write_fp4_kernel, static_cast<unsigned>((num_blocks + 127) / 128), 128, 0, stream, src, src_stride,
                   slots, num_blocks, blocks_per_row, format.block, format.e4m3_scales, codes, scales);
}

void gather_fp4_group_entries(const uint8_t* codes, const uint8_t* scales, int64_t dim, Fp4Format format,
                              const int32_t* block_tables, int64_t max_blocks, int64_t ratio, const int32_t* counts,
                              const int64_t* offsets, int64_t sequences, int64_t width, bool zero_padding,
                              __nv_bfloat16* out, cudaStream_t stream) {
  if (sequences == 0 || width == 0) return;
  launch_dependent(gather_fp4_groups_kernel, dim3(static_cast<unsigned>(width), static_cast<unsigned>(sequences)), 128,
                   0, stream, codes, scales, dim, format.block, format.e4m3_scales, block_tables, max_blocks, ratio,
                   counts, offsets, zero_padding, out);
}

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
