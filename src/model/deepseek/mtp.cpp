// DeepSeek-V3's MTP module on the CPU (deepseek_model.h): the drafter of speculative decoding.
#include <vector>

#include "kernels/cpu/ops.h"
#include "src/model/deepseek/deepseek_model.h"

namespace deepinfer {

void DeepseekModel::enable() {
  if (!mtp_enabled_) add_cache_layers(1);  // its MLA layer, after the model's
  mtp_enabled_ = true;
}

Tensor DeepseekModel::mtp_forward(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                  KvCache& kv_cache) const {
  DI_CHECK(mtp_enabled_, "mtp_forward before the MTP module was enabled");
  DI_CHECK(static_cast<int64_t>(hidden_rows.size()) == batch.num_tokens(), "{} hidden rows for {} tokens",
           hidden_rows.size(), batch.num_tokens());
  MlaKvCache& cache = host_cache(kv_cache);
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens(), H = c.hidden_size, m = c.num_hidden_layers;
  check_batch(batch, c.vocab_size);
  const std::vector<int32_t> positions = batch.positions();
  const int64_t half = rotary_.half_dim();
  std::vector<float> cos(T * half), sin(T * half);
  rotary_.fill(positions.data(), T, cos.data(), sin.data());
  const Mtp& w = *mtp_;

  // x = eh_proj([enorm(embed(next token)) ; hnorm(h)])
  std::vector<float> joined(T * 2 * H), x(T * H), h(T * H), delta(T * H);
  std::vector<float> embedded(T * H);
  const int64_t kept = last_hidden_.ndim() == 2 ? last_hidden_.size(0) : 0;
  cpu::embedding(embed_, batch.token_ids.data(), embedded.data(), T, H);
  for (int64_t t = 0; t < T; ++t) {
    cpu::rms_norm(embedded.data() + t * H, w.enorm, joined.data() + t * 2 * H, 1, H, c.rms_norm_eps);
    DI_CHECK(hidden_rows[t] >= 0 && hidden_rows[t] < kept, "hidden row {} of the last forward's {}", hidden_rows[t],
             kept);
    cpu::rms_norm(last_hidden_.data<float>() + hidden_rows[t] * H, w.hnorm, joined.data() + t * 2 * H + H, 1, H,
                  c.rms_norm_eps);
  }
  cpu::linear(joined.data(), w.eh_proj, nullptr, x.data(), T, H, 2 * H);

  // One decoder layer, with its own cache layer (index num_hidden_layers) and experts.
  cpu::rms_norm(x.data(), w.layer.input_norm, h.data(), T, H, c.rms_norm_eps);
  attention(m, w.layer.attention, batch, positions.data(), cos.data(), sin.data(), h.data(), delta.data(), cache);
  cpu::axpy(1.0f, delta.data(), x.data(), T * H);
  cpu::rms_norm(x.data(), w.layer.post_attention_norm, h.data(), T, H, c.rms_norm_eps);
  if (w.layer.is_moe) moe(mtp_experts_, 0, w.layer.moe, h.data(), delta.data(), T, nullptr);
  else dense_mlp(w.layer.mlp, h.data(), delta.data(), T);
  cpu::axpy(1.0f, delta.data(), x.data(), T * H);
  return cpu_final_logits(batch, x.data(), w.head_norm, w.head, H, c.vocab_size, c.rms_norm_eps);
}

}  // namespace deepinfer
