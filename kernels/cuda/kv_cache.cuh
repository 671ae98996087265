// Moving entries in and out of one layer of a paged KV cache ([num_blocks * block_size, dim] bf16), by flat
// slot (physical block * block_size + offset; the caller maps positions to slots through block tables).
//   write_kv_entries:  cache[slots[t], 0:dim] = src[t * src_stride, 0:dim]  (cache rows cache_stride >= dim apart:
//                      a layer may write the first part of a wider entry)
//   gather_kv_entries: out[t, :] = cache[slots[t], :]
//   (write_kv_entries skips rows whose slot is negative: padding rows of a fixed-shape step.)
// and DeepSeek-V4.1's window K=V as the FP8 bytes its numerics imply (the CPU model's fake_quant_fp8, blocks of 32:
// e4m3 codes [num_blocks * block_size, dim] with a ue8m0 scale byte per 32 values [num_blocks * block_size, dim / 32];
// dim a multiple of 32):
//   write_fp8_kv_rows:  slot slots[t] = the quantisation of src[t * src_stride, 0:dim] (scale 2^ceil(log2(amax / 448))
//                       per block, kernels/fp_formats.h), so that its value is fp8_dequantised's
//   gather_fp8_kv_rows: out[t * out_stride, 0:dim] = the values of slot slots[t] (bf16 holds them exactly)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void write_kv_entries(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens,
                      int64_t dim, __nv_bfloat16* cache, int64_t cache_stride, cudaStream_t stream);
void gather_kv_entries(const __nv_bfloat16* cache, const int64_t* slots, int64_t num_tokens, int64_t dim,
                       __nv_bfloat16* out, cudaStream_t stream);

// The same rows serve DeepSeek-V4.1's FP8 engram tables (a ue8m0 scale per 32 values of a row, rows gathered by
// id), whose blocks take the least power of two that fits instead (so the checkpoint's FP8 values quantise back
// to themselves): Fp8Scales::kExactFit.
enum class Fp8Scales { kActivation, kExactFit };
// DeepSeek-V4.1's compressed entries (and indexer keys) cached per group (kernels/group_slots.h): rows offsets[s] + g
// of out = entry group_slot(block_tables + s * max_blocks, ratio, g) of `entries` [*, dim], for g < counts[s];
// with zero_padding, rows counts[s] <= g < width zeroed (a fixed-shape layout), otherwise left alone.
void gather_group_entries(const __nv_bfloat16* entries, int64_t dim, const int32_t* block_tables, int64_t max_blocks,
                          int64_t ratio, const int32_t* counts, const int64_t* offsets, int64_t sequences,
                          int64_t width, bool zero_padding, __nv_bfloat16* out, cudaStream_t stream);

// DeepSeek-V4.1's compressed entries (blocks of 16, e4m3 scales) and indexer keys (blocks of 32, ue8m0 scales) as
// the FP4 bytes their numerics imply (kernels/cpu/fake_quant.h's encode_fp4_rows / decode_fp4_rows, the same
// layout): codes [slots, dim / 2] and a scale byte a block [slots, dim / block].
//   write_fp4_rows: slot slots[t] = the bytes of what fake_quant_fp4 makes of src row t (taken before that
//                   quantisation); negative slots skipped
//   gather_fp4_group_entries: gather_group_entries' layout, the values decoded (bf16 holds them exactly)
struct Fp4Format {  // block 16 with e4m3 scales (entries), or 32 with ue8m0 ones (keys)
  int64_t block = 16;
  bool e4m3_scales = true;
};
void write_fp4_rows(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_rows,
                    int64_t dim, Fp4Format format, uint8_t* codes, uint8_t* scales, cudaStream_t stream);
void gather_fp4_group_entries(const uint8_t* codes, const uint8_t* scales, int64_t dim, Fp4Format format,
                              const int32_t* block_tables, int64_t max_blocks, int64_t ratio, const int32_t* counts,
                              const int64_t* offsets, int64_t sequences, int64_t width, bool zero_padding,
                              __nv_bfloat16* out, cudaStream_t stream);

void write_fp8_kv_rows(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens,
                       int64_t dim, uint8_t* codes, uint8_t* scales, cudaStream_t stream,
                       Fp8Scales rule = Fp8Scales::kActivation);
void gather_fp8_kv_rows(const uint8_t* codes, const uint8_t* scales, const int64_t* slots, int64_t num_tokens,
                        int64_t dim, __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream);
void gather_fp8_kv_rows(const uint8_t* codes, const uint8_t* scales, const int32_t* slots, int64_t num_tokens,
                        int64_t dim, __nv_bfloat16* out, int64_t out_stride, cudaStream_t stream);

}  // namespace deepinfer::cuda
