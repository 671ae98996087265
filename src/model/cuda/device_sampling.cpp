#include "src/model/cuda/device_sampling.h"

#include <algorithm>

#include "kernels/cuda/sampling.cuh"

namespace deepinfer {

std::vector<int32_t> sample_on_device(float* logits, int64_t num_rows, int64_t vocab,
                                      std::span<const SamplingRow> rows, const TokenMasks* masks,
                                      uint64_t* logits_hashes, ScratchPool& scratch,
                                      cudaEvent_t step_end) {
  DI_CHECK(static_cast<int64_t>(rows.size()) == num_rows, "{} sampling rows for {} logits rows", rows.size(), num_rows);
  std::vector<int32_t> tokens(num_rows);
  if (num_rows == 0) return tokens;
  static_assert(sizeof(SamplingRow) == sizeof(cuda::SamplingRow), "the engine's and the kernel's rows must match");
  auto* params = reinterpret_cast<cuda::SamplingRow*>(
      device_copy(scratch, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(rows.data()),
                                                reinterpret_cast<const uint8_t*>(rows.data() + rows.size()))));
  auto* out = scratch.alloc<int32_t>(num_rows);
  uint64_t* hashes = logits_hashes != nullptr ? scratch.alloc<uint64_t>(num_rows) : nullptr;
  if (hashes != nullptr) cuda::logits_row_hashes(logits, num_rows, vocab, hashes, nullptr);
  if (masks != nullptr && !masks->empty()) {
    DI_CHECK(static_cast<int64_t>(masks->masked.size()) == num_rows &&
                 static_cast<int64_t>(masks->bits.size()) == num_rows * masks->words,
             "token masks for {} rows, {} logits rows", masks->masked.size(), num_rows);
    cuda::apply_token_bitmask(logits, num_rows, vocab, device_copy(scratch, masks->bits), masks->words,
                              device_copy(scratch, masks->masked), nullptr);
  }
  const bool all_greedy = std::all_of(rows.begin(), rows.end(), [](const SamplingRow& r) { return r.temperature <= 0; });
  if (all_greedy) {
    cuda::argmax_rows(logits, num_rows, vocab, out, nullptr);
  } else {
    const size_t bytes = cuda::sample_workspace_bytes(num_rows, vocab);
    cuda::sample_rows(logits, num_rows, vocab, params, out, scratch.alloc<uint8_t>(bytes), bytes, nullptr);
  }
  DI_CUDA_CHECK(cudaGetLastError());
  if (step_end != nullptr) DI_CUDA_CHECK(cudaEventRecord(step_end, cudaStreamPerThread));
  DI_CUDA_CHECK(cudaMemcpy(tokens.data(), out, num_rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
  if (hashes != nullptr)
    DI_CUDA_CHECK(cudaMemcpy(logits_hashes, hashes, num_rows * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  // The kernels give `vocab` for a row without one finite logit: say so here, where it arose, not as a bad token
  // in the next step's input.
  for (int64_t r = 0; r < num_rows; ++r)
    DI_CHECK(tokens[r] >= 0 && tokens[r] < vocab, "logits row {} of {} has no finite value (the step's forward "
             "produced NaN or -inf there)", r, num_rows);
  return tokens;
}

}  // namespace deepinfer
