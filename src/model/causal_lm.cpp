#include "src/model/causal_lm.h"

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "src/core/check.h"

namespace deepinfer {

Tensor DraftModule::mtp_forward(const ForwardBatch&, std::span<const int64_t>, KvCache&) const {
  throw InputError("this draft module is not DeepSeek-V3's MTP module");
}

std::vector<MtpDraft> DraftModule::mtp_draft(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
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

std::vector<DraftBlock> DraftModule::dspark_draft(const ForwardBatch&, KvCache&, std::span<const SamplingRow>) const {
  throw InputError("this draft module is not DeepSeek-V4.1's DSpark drafter");
}

void DraftModule::start_chained_draft(const ForwardBatch&, KvCache&, std::span<const SamplingRow>) const {
  DI_CHECK(false, "this backend does not chain drafts behind their verify step (chains_drafts)");
}

std::vector<DraftBlock> DraftModule::finish_chained_draft() const {
  DI_CHECK(false, "this backend does not chain drafts behind their verify step (chains_drafts)");
  return {};
}

DraftModule& require_draft_module(CausalLm& model) {
  DraftModule* module = model.draft_module();
  DI_INPUT_CHECK(module != nullptr, "the checkpoint has no draft module, so it cannot draft: DeepSeek-V3's MTP layer "
                 "(model.layers.{}.eh_proj.weight and its module) or DeepSeek-V4.1's DSpark layers "
                 "(mtp.0.main_proj.weight and the mtp.N.* modules, with dspark_* in its config)",
                 model.config().num_hidden_layers);
  return *module;
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
