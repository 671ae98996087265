#include "src/model/cuda/draft_chain.h"

#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/speculation.cuh"

namespace deepinfer {

void DraftChain::accept(const ForwardBatch& verify, const int32_t* token_ids, const int32_t* drawn, ScratchPool& pool) {
  const auto S = std::ssize(verify.sequences);
  std::vector<int32_t> first_rows, num_rows;
  for (const SequenceChunk& seq : verify.sequences) {
    first_rows.push_back(first_rows.empty() ? 0 : first_rows.back() + num_rows.back());
    num_rows.push_back(static_cast<int32_t>(seq.num_new));
  }
  if (std::ssize(accepted_) < S) {  // grows rarely
    accepted_ = DeviceArray<int32_t>(2 * S);
    anchors_ = DeviceArray<int32_t>(2 * S);
  }
  cuda::accept_drafts(token_ids, drawn, device_copy(pool, first_rows), device_copy(pool, num_rows), S,
                      accepted_.data(), anchors_.data(), cudaStreamPerThread);
  DI_CUDA_CHECK(cudaGetLastError());
  accepted_sequences_ = S;
}

void DraftChain::begin(int64_t sequences) {
  DI_CHECK(!outstanding_, "a chained draft started before the last one finished");
  DI_CHECK(accepted_sequences_ == sequences, "a chained draft of {} blocks after a verify step of {} sequences "
           "accepted on the device", sequences, accepted_sequences_);
  accepted_sequences_ = -1;
}

DraftChain::Outputs DraftChain::outputs(int64_t rows) {
  const size_t host_bytes = rows * (sizeof(int32_t) + 2 * sizeof(float)) + rows * sizeof(int32_t);
  if (std::ssize(tokens_) < rows || host_.bytes() < host_bytes) {
    tokens_ = DeviceArray<int32_t>(2 * rows);
    score_a_ = DeviceArray<float>(2 * rows);
    score_b_ = DeviceArray<float>(2 * rows);
    host_ = MappedHostArray(2 * host_bytes);
  }
  return {tokens_.data(), score_a_.data(), score_b_.data()};
}

void DraftChain::started(std::vector<int64_t> positions, int64_t rows) {
  auto* host = static_cast<uint8_t*>(host_.data());
  const auto copy_back = [&](const void* from, size_t bytes) {
    DI_CUDA_CHECK(cudaMemcpyAsync(host, from, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
    host += bytes;
  };
  copy_back(tokens_.data(), rows * sizeof(int32_t));
  copy_back(score_a_.data(), rows * sizeof(float));
  copy_back(score_b_.data(), rows * sizeof(float));
  copy_back(accepted_.data(), positions.size() * sizeof(int32_t));
  DI_CUDA_CHECK(cudaEventRecord(copied_.get(), cudaStreamPerThread));
  positions_ = std::move(positions);
  rows_ = rows;
  outstanding_ = true;
}

DraftChain::Results DraftChain::finish() {
  DI_CHECK(outstanding_, "no chained draft to finish");
  outstanding_ = false;
  DI_CUDA_CHECK(cudaEventSynchronize(copied_.get()));
  const auto* host = static_cast<const uint8_t*>(host_.data());
  Results r;
  r.tokens = reinterpret_cast<const int32_t*>(host);
  r.score_a = reinterpret_cast<const float*>(host + rows_ * sizeof(int32_t));
  r.score_b = r.score_a + rows_;
  const auto* accepted = reinterpret_cast<const int32_t*>(r.score_b + rows_);
  r.positions = positions_;
  for (size_t s = 0; s < r.positions.size(); ++s) r.positions[s] += accepted[s];
  return r;
}

void DraftChain::fill_inputs(int32_t* token_ids, const std::vector<int32_t>& targets, ScratchPool& pool) {
  if (targets.empty()) return;
  // The draft runs before the step that reads it on the stream.
  DI_CHECK(outstanding_, "a step's inputs name a draft's tokens, but no draft was started");
  for (size_t i = 1; i < targets.size(); i += 2)
    DI_CHECK(targets[i] >= 0 && targets[i] < rows_, "an input names row {} of a draft of {} rows", targets[i], rows_);
  if (fill_targets_.size() < targets.size()) fill_targets_ = DeviceArray<int32_t>(2 * targets.size());
  copy_to_device(pool, targets, fill_targets_.data());
  cuda::scatter_sampled_tokens(tokens_.data(), fill_targets_.data(), std::ssize(targets) / 2, token_ids,
                               cudaStreamPerThread);
}

}  // namespace deepinfer
