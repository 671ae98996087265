// out[t, :] = table[ids[t], :] in bf16. Ids must be in [0, vocab).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void embedding(const __nv_bfloat16* table, const int32_t* ids, __nv_bfloat16* out, int64_t num_tokens, int64_t dim,
               cudaStream_t stream);

}  // namespace deepinfer::cuda
