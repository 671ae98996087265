#include "src/model/cuda/device_sampling.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/speculation.cuh"

namespace deepinfer {

namespace {

// The sampling kernels of a step: fingerprints into `hashes` (device, may be null), masks, then a token per row into
// `out` (device).
void draw_tokens(float* logits, int64_t num_rows, int64_t vocab, std::span<const SamplingRow> rows,
                 const TokenMasks* masks, uint64_t* hashes, int32_t* out, ScratchPool& scratch,
                 const int32_t* position_offsets = nullptr) {
  DI_CHECK(static_cast<int64_t>(rows.size()) == num_rows, "{} sampling rows for {} logits rows", rows.size(), num_rows);
  static_assert(sizeof(SamplingRow) == sizeof(cuda::SamplingRow), "the engine's and the kernel's rows must match");
  auto* params = reinterpret_cast<cuda::SamplingRow*>(
      device_copy(scratch, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(rows.data()),
                                                reinterpret_cast<const uint8_t*>(rows.data() + rows.size()))));
  if (position_offsets != nullptr) cuda::offset_sampling_positions(params, num_rows, position_offsets, nullptr);
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
    cuda::argmax_rows(logits, num_rows, vocab, out, nullptr, nullptr);
  } else {
    const size_t bytes = cuda::sample_workspace_bytes(num_rows, vocab);
    cuda::sample_rows(logits, num_rows, vocab, params, out, scratch.alloc<uint8_t>(bytes), bytes, nullptr);
  }
  DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// The kernels give `vocab` for a row without one finite logit: say so where it arose, not as a bad token in the next
// step's input.
void check_drawn_tokens(const std::vector<int32_t>& tokens, int64_t vocab) {
  const auto num_rows = static_cast<int64_t>(tokens.size());
  for (int64_t r = 0; r < num_rows; ++r)
    DI_CHECK(tokens[r] >= 0 && tokens[r] < vocab, "logits row {} of {} has no finite value (the step's forward "
             "produced NaN or -inf there)", r, num_rows);
}

void sample_into_device(float* logits, int64_t num_rows, int64_t vocab, std::span<const SamplingRow> rows,
                        int32_t* out, ScratchPool& scratch, const int32_t* position_offsets) {
  if (num_rows > 0) draw_tokens(logits, num_rows, vocab, rows, nullptr, nullptr, out, scratch, position_offsets);
}

std::vector<int32_t> sample_on_device(float* logits, int64_t num_rows, int64_t vocab,
                                      std::span<const SamplingRow> rows, const TokenMasks* masks,
                                      uint64_t* logits_hashes, ScratchPool& scratch,
                                      cudaEvent_t step_end) {
  std::vector<int32_t> tokens(num_rows);
  if (num_rows > 0) {
    auto* out = scratch.alloc<int32_t>(num_rows);
    uint64_t* hashes = logits_hashes != nullptr ? scratch.alloc<uint64_t>(num_rows) : nullptr;
    draw_tokens(logits, num_rows, vocab, rows, masks, hashes, out, scratch);
    if (step_end != nullptr) DI_CUDA_CHECK(cudaEventRecord(step_end, cudaStreamPerThread));
    DI_CUDA_CHECK(cudaMemcpy(tokens.data(), out, num_rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
    if (hashes != nullptr)
      DI_CUDA_CHECK(cudaMemcpy(logits_hashes, hashes, num_rows * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  } else if (step_end != nullptr) {
    DI_CUDA_CHECK(cudaEventRecord(step_end, cudaStreamPerThread));  // (every started step ends: DeviceIdleMeter)
  }
  check_drawn_tokens(tokens, vocab);
  return tokens;
}

void DeviceSampler::fill_inputs(int32_t* token_ids, const std::vector<int32_t>& targets, ScratchPool& scratch) {
  if (targets.empty()) return;
  DI_CHECK(started_ > 0 && started_ == finished_ + 1, "a step's inputs name the previous step's tokens, but {} steps "
           "are outstanding", started_ - finished_);
  const Slot& previous = slots_[(started_ - 1) % 2];
  for (size_t i = 1; i < targets.size(); i += 2)
    DI_CHECK(targets[i] >= 0 && targets[i] < previous.rows, "an input names row {} of a step of {} rows", targets[i],
             previous.rows);
  if (targets_.size() < targets.size())  // grows rarely (a free synchronises)
    targets_ = DeviceArray<int32_t>(std::max(targets.size(), 2 * targets_.size()));
  copy_to_device(scratch, targets, targets_.data());
  cuda::scatter_sampled_tokens(previous.tokens.data(), targets_.data(), static_cast<int64_t>(targets.size() / 2),
                               token_ids, cudaStreamPerThread);
}

void DeviceSampler::start(float* logits, int64_t num_rows, int64_t vocab, std::span<const SamplingRow> rows,
                          bool want_hashes, ScratchPool& scratch, cudaEvent_t step_end) {
  DI_CHECK(started_ - finished_ < 2, "three steps started before the first finished");
  Slot& slot = slots_[started_ % 2];
  ++started_;
  vocab_ = vocab;
  slot.rows = num_rows;
  slot.hashes_wanted = want_hashes;
  if (static_cast<int64_t>(slot.tokens.size()) < num_rows || slot.host.bytes() == 0) {  // grows rarely: frees synchronise
    const auto capacity = static_cast<size_t>(std::max<int64_t>(num_rows, 2 * slot.tokens.size()));
    slot.tokens = DeviceArray<int32_t>(capacity);
    slot.hashes = DeviceArray<uint64_t>(capacity);
    slot.host = MappedHostArray(capacity * (sizeof(int32_t) + sizeof(uint64_t)));
  }
  if (num_rows > 0)
    draw_tokens(logits, num_rows, vocab, rows, nullptr, want_hashes ? slot.hashes.data() : nullptr,
                slot.tokens.data(), scratch);
  if (step_end != nullptr) DI_CUDA_CHECK(cudaEventRecord(step_end, cudaStreamPerThread));
  auto* host = static_cast<uint8_t*>(slot.host.data());
  if (num_rows > 0) {
    DI_CUDA_CHECK(cudaMemcpyAsync(host, slot.tokens.data(), num_rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  cudaStreamPerThread));
    if (want_hashes)
      DI_CUDA_CHECK(cudaMemcpyAsync(host + slot.tokens.size() * sizeof(int32_t), slot.hashes.data(),
                                    num_rows * sizeof(uint64_t), cudaMemcpyDeviceToHost, cudaStreamPerThread));
  }
  DI_CUDA_CHECK(cudaEventRecord(slot.copied.get(), cudaStreamPerThread));
}

std::vector<int32_t> DeviceSampler::finish(uint64_t* logits_hashes) {
  DI_CHECK(finished_ < started_, "no started step to finish");
  const Slot& slot = slots_[finished_ % 2];
  ++finished_;
  DI_CUDA_CHECK(cudaEventSynchronize(slot.copied.get()));
  const auto* host = static_cast<const uint8_t*>(slot.host.data());
  std::vector<int32_t> tokens(slot.rows);
  if (slot.rows > 0) std::memcpy(tokens.data(), host, slot.rows * sizeof(int32_t));
  if (slot.hashes_wanted && logits_hashes != nullptr && slot.rows > 0)
    std::memcpy(logits_hashes, host + slot.tokens.size() * sizeof(int32_t), slot.rows * sizeof(uint64_t));
  check_drawn_tokens(tokens, vocab_);
  return tokens;
}

}  // namespace deepinfer
