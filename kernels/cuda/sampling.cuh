// Greedy sampling: the index of each row's largest logit (ties to the lowest index, as torch.argmax).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
