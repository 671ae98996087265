#include "src/model/deepseek/deepseek_model.h"

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "src/model/deepseek/deepseek_cpu_blocks.h"

namespace deepinfer {

namespace {
ExpertStore::Dims mtp_expert_dims(const ModelConfig& c) {
  return {1, c.n_routed_experts, c.hidden_size, c.moe_intermediate_size};
}
}  // namespace

DeepseekModel::DeepseekModel(ModelConfig config, WeightStore weights)
    : HostCausalLm(std::move(config), std::move(weights)), rotary_(config_),
      mtp_experts_(mtp_expert_dims(config_), static_cast<float>(config_.swiglu_limit)) {
  set_cache_entry(config_.kv_lora_rank, config_.qk_rope_head_dim);
  const ModelConfig& c = config_;
  // Under expert parallelism a rank loaded only the experts it owns.
  experts_.take_from(weights_, [&](int64_t moe_layer, int64_t e) {
    const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", moe_layer + c.first_k_dense_replace, e);
    return HostExpertStore::TensorNames{p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"};
  });
  embed_ = weights_.data("model.embed_tokens.weight");
  final_norm_ = weights_.data("model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : weights_.data("lm_head.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers_.push_back(resolve_layer(l));
  // The first MTP layer, where the checkpoint kept it (transformers drops it when it saves).
  const int64_t m = c.num_hidden_layers;
  const std::string p = fmt::format("model.layers.{}.", m);
  if (c.num_nextn_predict_layers > 0 && weights_.data_or_null(p + "eh_proj.weight") != nullptr) {
    Mtp mtp;
    mtp.layer = resolve_layer(m);
    mtp.enorm = weights_.data(p + "enorm.weight");
    mtp.hnorm = weights_.data(p + "hnorm.weight");
    mtp.eh_proj = weights_.data(p + "eh_proj.weight");
    mtp.head_norm = weights_.data(p + "shared_head.norm.weight");
    mtp.head = weights_.data(p + "shared_head.head.weight");
    mtp_experts_.take_from(weights_, [&](int64_t, int64_t e) {
      const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
      return HostExpertStore::TensorNames{q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight"};
    });
    mtp_ = std::move(mtp);
  }
}

DeepseekModel::Layer DeepseekModel::resolve_layer(int64_t l) const {
  const ModelConfig& c = config_;
  const std::string p = fmt::format("model.layers.{}.", l);
  Layer layer;
  layer.input_norm = weights_.data(p + "input_layernorm.weight");
  layer.post_attention_norm = weights_.data(p + "post_attention_layernorm.weight");
  Attention& a = layer.attention;
  const std::string s = p + "self_attn.";
  if (c.q_lora_rank > 0) {
    a.q_a = linear(s + "q_a_proj");
    a.q_a_norm = weights_.data(s + "q_a_layernorm.weight");
    a.q_b = linear(s + "q_b_proj");
  } else {
    a.q = linear(s + "q_proj");
  }
  a.kv_a = linear(s + "kv_a_proj_with_mqa");
  a.kv_a_norm = weights_.data(s + "kv_a_layernorm.weight");
  a.kv_b = linear(s + "kv_b_proj");
  a.o = linear(s + "o_proj");
  layer.is_moe = c.is_moe_layer(l);
  if (layer.is_moe) {
    layer.moe.router = weights_.data(p + "mlp.gate.weight");
    layer.moe.correction_bias = weights_.data_or_null(p + "mlp.gate.e_score_correction_bias");
    layer.moe.has_shared = c.n_shared_experts > 0;
    if (layer.moe.has_shared)
      layer.moe.shared = resolve_mlp(p + "mlp.shared_experts", c.moe_intermediate_size * c.n_shared_experts);
  } else {
    layer.mlp = resolve_mlp(p + "mlp", c.intermediate_size);
  }
  return layer;
}

DeepseekModel::Linear DeepseekModel::linear(const std::string& prefix) const {
  return {weights_.data(prefix + ".weight"), weights_.data_or_null(prefix + ".bias")};
}

DeepseekModel::Mlp DeepseekModel::resolve_mlp(const std::string& prefix, int64_t intermediate) const {
  return {linear(prefix + ".gate_proj"), linear(prefix + ".up_proj"), linear(prefix + ".down_proj"), intermediate};
}

Tensor DeepseekModel::forward(const ForwardBatch& batch, KvCache& kv_cache, ExpertDispatcher* experts) const {
  return run(batch, kv_cache, experts, mtp_enabled_ ? &last_hidden_ : nullptr);
}

Tensor DeepseekModel::run(const ForwardBatch& batch, KvCache& kv_cache, ExpertDispatcher* experts,
                          Tensor* hidden) const {
  MlaKvCache& cache = host_cache(kv_cache);
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const int64_t H = c.hidden_size;
  check_batch(batch, c.vocab_size);
  const std::vector<int32_t> positions = batch.positions();
  const int64_t half = rotary_.half_dim();
  std::vector<float> cos(T * half), sin(T * half);
  rotary_.fill(positions.data(), T, cos.data(), sin.data());

  CpuBlocks blocks{*this, batch, positions.data(), cos.data(), sin.data(), cache, experts, hidden, T, H};
  return run_deepseek_layers(c, blocks);
}

}  // namespace deepinfer
