// Seeded dummy weights generated on the device, value for value the host's make_dummy_tensor
// (src/model/weights.cpp): out[i] = offset + scale * N(0,1)(key, i) with the counter-based generator of
// src/core/random.h (splitmix64 + Box-Muller in double precision), rounded to bf16 or kept in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

// out[i] takes the value of index first_index + i (a part of a larger tensor, e.g. one rank's rows of a table).
void fill_dummy_bf16(__nv_bfloat16* out, int64_t n, uint64_t key, float scale, float offset, cudaStream_t stream,
                     int64_t first_index = 0);
void fill_dummy_f32(float* out, int64_t n, uint64_t key, float scale, float offset, cudaStream_t stream,
                    int64_t first_index = 0);

}  // namespace deepinfer::cuda
