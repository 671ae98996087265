// out[t, :] = table[ids[t], :] in bf16. Ids must be in [0, vocab).
// gather_byte_rows: rows of any format as bytes, out + i * out_stride <- table + rows[i] * row_bytes (a rank serving
// the rows of its part of a split table; two calls with one stride interleave codes and scales).
// gather_int32_rows: out[i, :] = table[rows[i], :] for int32 rows of `width` (a step plan's rows: block tables,
// lengths).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void embedding(const __nv_bfloat16* table, const int32_t* ids, __nv_bfloat16* out, int64_t num_tokens, int64_t dim,
               cudaStream_t stream);
void gather_byte_rows(const uint8_t* table, int64_t row_bytes, const int64_t* rows, int64_t num_rows, uint8_t* out,
                      int64_t out_stride, cudaStream_t stream);
void gather_int32_rows(const int32_t* table, int64_t width, const int32_t* rows, int64_t num_rows, int32_t* out,
                       cudaStream_t stream);

}  // namespace deepinfer::cuda
