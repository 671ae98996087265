#include "src/model/causal_lm.h"

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "src/core/check.h"

namespace deepinfer {

std::vector<int32_t> CausalLm::forward_and_sample(const ForwardBatch&, KvCache&, ExpertDispatcher*,
                                                  std::span<const SamplingRow>, const TokenMasks*, uint64_t*) const {
  DI_CHECK(false, "this backend samples on the host: call forward() and sample its logits");
  return {};
}

void CausalLm::start_forward_and_sample(const ForwardBatch&, KvCache&, ExpertDispatcher*, std::span<const SamplingRow>,
                                        bool) const {
  DI_CHECK(false, "this backend does not start steps asynchronously (samples_async)");
}

std::vector<int32_t> CausalLm::finish_forward_and_sample(uint64_t*) const {
  DI_CHECK(false, "this backend does not start steps asynchronously (samples_async)");
  return {};
}

void CausalLm::enable_mtp() {
  throw InputError("this model has no draft module loaded (DeepSeek V3 with its nextn layer, or V4.1 with "
                   "its DSpark layers)");
}

Tensor CausalLm::mtp_forward(const ForwardBatch&, std::span<const int64_t>, KvCache&) const {
  throw InputError("this model has no MTP module");
}

std::vector<CausalLm::MtpDraft> CausalLm::mtp_draft(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                                    KvCache& cache) const {
  const Tensor logits = mtp_forward(batch, hidden_rows, cache);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  std::vector<int32_t> tokens(rows);
  std::vector<float> probability(rows);
  cpu::argmax_rows(logits.data<float>(), rows, vocab, tokens.data(), probability.data());
  std::vector<MtpDraft> drafts(rows);
  for (int64_t r = 0; r < rows; ++r) drafts[r] = {tokens[r], probability[r]};
  return drafts;
}

std::vector<CausalLm::DraftBlock> CausalLm::dspark_draft(const ForwardBatch&, KvCache&,
                                                         std::span<const SamplingRow>) const {
  throw InputError("this model has no DSpark drafter enabled (DeepSeek-V4.1 with its mtp.* draft layers)");
}

void CausalLm::start_chained_draft(const ForwardBatch&, KvCache&, std::span<const SamplingRow>) const {
  DI_CHECK(false, "this backend does not chain drafts behind their verify step (chains_drafts)");
}

std::vector<CausalLm::DraftBlock> CausalLm::finish_chained_draft() const {
  DI_CHECK(false, "this backend does not chain drafts behind their verify step (chains_drafts)");
  return {};
}

void check_batch(const ForwardBatch& batch, int64_t vocab) {
  int64_t claimed = 0;
  for (const SequenceChunk& seq : batch.sequences) claimed += seq.num_new;
  DI_CHECK(claimed == batch.num_tokens(), "batch has {} tokens but its sequences claim {}", batch.num_tokens(), claimed);
  for (int32_t id : batch.token_ids) DI_CHECK(id >= 0 && id < vocab, "token id {} outside the vocabulary", id);
}

Tensor cpu_final_logits(const ForwardBatch& batch, const float* hidden, const float* norm, const float* head,
                        int64_t hidden_size, int64_t vocab, float eps) {
  const std::vector<int64_t> rows = batch.logits_rows();
  const auto R = static_cast<int64_t>(rows.size());
  const int64_t H = hidden_size;
  std::vector<float> selected(R * H);
  for (int64_t r = 0; r < R; ++r) std::copy_n(hidden + rows[r] * H, H, selected.data() + r * H);
  cpu::rms_norm(selected.data(), norm, selected.data(), R, H, eps);
  Tensor logits = Tensor::zeros({R, vocab});
  cpu::linear(selected.data(), head, nullptr, logits.data<float>(), R, vocab, H);
  return logits;
}

}  // namespace deepinfer
