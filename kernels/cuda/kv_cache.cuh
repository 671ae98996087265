// Moving entries in and out of one layer of a paged KV cache ([num_blocks * block_size, dim] bf16), by flat
// slot (physical block * block_size + offset; the caller maps positions to slots through block tables).
//   write_kv_entries:  cache[slots[t], 0:dim] = src[t * src_stride, 0:dim]  (cache rows cache_stride >= dim apart:
//                      a layer may write the first part of a wider entry)
//   gather_kv_entries: out[t, :] = cache[slots[t], :]
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void write_kv_entries(const __nv_bfloat16* src, int64_t src_stride, const int64_t* slots, int64_t num_tokens,
                      int64_t dim, __nv_bfloat16* cache, int64_t cache_stride, cudaStream_t stream);
void gather_kv_entries(const __nv_bfloat16* cache, const int64_t* slots, int64_t num_tokens, int64_t dim,
                       __nv_bfloat16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
