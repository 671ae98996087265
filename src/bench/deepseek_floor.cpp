#include "src/bench/deepseek_floor.h"

#include <string>

#include "src/model/deepseek/deepseek_config.h"

namespace deepinfer {

namespace {

// Whether an FP8 checkpoint stores `name` as e4m3 blocks: the Linear weights of the decoder layers (the MTP layers'
// eh_proj is left bf16 here: it is one matrix of the draft module).
bool stored_fp8(const ModelConfig& c, const std::string& name, const Shape& shape) {
  if (!c.quantization.fp8 || shape.size() != 2 || !name.starts_with("model.layers.")) return false;
  if (name.ends_with("eh_proj.weight")) return false;
  return name.ends_with("_proj.weight") || name.ends_with("_proj_with_mqa.weight");
}

double ceil_div(int64_t a, int64_t b) { return static_cast<double>((a + b - 1) / b); }

// Bytes of an [n, k] matrix: FP8 codes and an fp32 scale per block, or bf16.
double matrix_bytes(const ModelConfig& c, int64_t n, int64_t k, bool fp8) {
  if (!fp8) return 2.0 * static_cast<double>(n) * k;
  return static_cast<double>(n) * k +
         4.0 * ceil_div(n, c.quantization.block_rows) * ceil_div(k, c.quantization.block_cols);
}

struct Tally {
  double bytes = 0, params = 0;
  double fp8_flops = 0, bf16_flops = 0;  // per row the weights are applied to
};

// The non-expert weights by where they sit (routed experts are counted from their shape: expert_bytes).
struct NonExpertWeights {
  Tally layers;     // the decoder layers
  Tally mtp;        // the MTP layers
  Tally embedding;  // read a row a token
  Tally head;       // the final norm and the head, applied to the rows whose logits are taken
};

NonExpertWeights non_expert_weights(const ModelConfig& c, WeightForm form) {
  NonExpertWeights w;
  for (const TensorSpec& spec : deepseek_tensor_specs(c)) {
    if (deepseek_routed_expert(spec.name)) continue;
    Tally& t = spec.name == "model.embed_tokens.weight" ? w.embedding
               : !spec.name.starts_with("model.layers.") ? w.head
               : std::stoll(spec.name.substr(13)) >= c.num_hidden_layers ? w.mtp
                                                                          : w.layers;
    double n = 1;
    for (int64_t d : spec.shape) n *= static_cast<double>(d);
    t.params += n;
    const bool fp8 = form != WeightForm::kBf16 && stored_fp8(c, spec.name, spec.shape) &&
                     !(form == WeightForm::kCudaBackend && spec.name.ends_with("kv_b_proj.weight"));
    t.bytes += spec.shape.size() == 2 ? matrix_bytes(c, spec.shape[0], spec.shape[1], fp8) : 2.0 * n;
    if (spec.shape.size() == 2 && &t != &w.embedding) (fp8 ? t.fp8_flops : t.bf16_flops) += 2.0 * n;
  }
  return w;
}

bool experts_fp8(const ModelConfig& c, WeightForm form) { return form != WeightForm::kBf16 && c.quantization.fp8; }

double num_moe_layers(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n += c.is_moe_layer(l) ? 1 : 0;
  return static_cast<double>(n);
}

// What every step pays whatever its attention: the decoder layers' weights applied to `rows`, the experts, the
// embedding rows, the head applied to `head_rows`.
StepWork weights_work(const ModelConfig& c, double rows, double head_rows, const ExpertWork& experts,
                      WeightForm form) {
  const NonExpertWeights w = non_expert_weights(c, form);
  const double moe_layers = num_moe_layers(c);
  const double expert_flops = 2.0 * 3.0 * static_cast<double>(c.hidden_size) * c.moe_intermediate_size;
  StepWork work;
  work.bytes = w.layers.bytes + w.head.bytes + rows * 2.0 * c.hidden_size +
               moe_layers * experts.experts_touched * deepseek_expert_bytes(c, form);
  work.fp8_flops = rows * w.layers.fp8_flops;
  work.bf16_flops = rows * w.layers.bf16_flops + head_rows * w.head.bf16_flops;
  (experts_fp8(c, form) ? work.fp8_flops : work.bf16_flops) += moe_layers * experts.pairs * expert_flops;
  return work;
}

}  // namespace

double deepseek_expert_bytes(const ModelConfig& c, WeightForm form) {
  const bool fp8 = experts_fp8(c, form);
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  return 2.0 * matrix_bytes(c, inter, h, fp8) + matrix_bytes(c, h, inter, fp8);
}

RankWeightBytes deepseek_rank_weight_bytes(const ModelConfig& c, int64_t expert_slots, WeightForm form, bool with_mtp) {
  const NonExpertWeights w = non_expert_weights(c, form);
  const double mtp_layers = with_mtp ? static_cast<double>(c.num_nextn_predict_layers) : 0.0;
  RankWeightBytes r;
  r.non_expert = w.layers.bytes + w.embedding.bytes + w.head.bytes + (with_mtp ? w.mtp.bytes : 0.0);
  if (c.n_routed_experts > 0)
    r.experts = (num_moe_layers(c) * static_cast<double>(expert_slots) +
                 mtp_layers * static_cast<double>(c.n_routed_experts)) * deepseek_expert_bytes(c, form);
  return r;
}

double deepseek_parameter_count(const ModelConfig& c, bool with_mtp) {
  const NonExpertWeights w = non_expert_weights(c, WeightForm::kBf16);
  const double mtp_layers = with_mtp ? static_cast<double>(c.num_nextn_predict_layers) : 0.0;
  const double expert = 3.0 * static_cast<double>(c.hidden_size) * c.moe_intermediate_size;
  return w.layers.params + w.embedding.params + w.head.params + (with_mtp ? w.mtp.params : 0.0) +
         (num_moe_layers(c) + mtp_layers) * static_cast<double>(c.n_routed_experts) * expert;
}

StepWork deepseek_decode_work(const ModelConfig& c, int64_t batch, int64_t context, const ExpertWork& experts,
                              WeightForm form) {
  const double rows = static_cast<double>(batch), layers = static_cast<double>(c.num_hidden_layers);
  StepWork work = weights_work(c, rows, rows, experts, form);
  const double keys = static_cast<double>(context) + 1;  // the cache and the new token's own entry
  work.bytes += rows * static_cast<double>(context) * layers * c.kv_entry_dim() * 2.0;
  work.bf16_flops += rows * layers * static_cast<double>(c.num_attention_heads) * keys * 2.0 *
                     static_cast<double>(c.kv_entry_dim() + c.kv_lora_rank);
  return work;
}

StepWork deepseek_prefill_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ExpertWork& experts,
                               WeightForm form) {
  const double tokens = static_cast<double>(prompts) * prompt_len, layers = static_cast<double>(c.num_hidden_layers);
  StepWork work = weights_work(c, tokens, static_cast<double>(prompts), experts, form);
  work.bytes += tokens * layers * c.kv_entry_dim() * 2.0;  // the latent KV written
  // Causal: position i attends to i + 1 keys; q.k over qk_head_dim and p.v over v_head_dim, 2 FLOPs a product.
  const double L = static_cast<double>(prompt_len);
  work.bf16_flops += static_cast<double>(prompts) * layers * static_cast<double>(c.num_attention_heads) *
                     (c.qk_head_dim() + c.v_head_dim) * L * (L + 1);
  return work;
}

}  // namespace deepinfer
