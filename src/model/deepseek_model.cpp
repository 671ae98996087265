#include "src/model/deepseek_model.h"

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "src/model/deepseek_layers.h"

namespace deepinfer {

DeepseekModel::DeepseekModel(ModelConfig config, WeightStore weights)
    : config_(std::move(config)), weights_(std::move(weights)), rotary_(config_) {
  const ModelConfig& c = config_;
  embed_ = weights_.data("model.embed_tokens.weight");
  final_norm_ = weights_.data("model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : weights_.data("lm_head.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    Layer layer;
    layer.input_norm = weights_.data(p + "input_layernorm.weight");
    layer.post_attention_norm = weights_.data(p + "post_attention_layernorm.weight");
    Attention& a = layer.attention;
    const std::string s = p + "self_attn.";
    if (c.q_lora_rank > 0) {
      a.q_a = weights_.data(s + "q_a_proj.weight");
      a.q_a_bias = weights_.data_or_null(s + "q_a_proj.bias");
      a.q_a_norm = weights_.data(s + "q_a_layernorm.weight");
      a.q_b = weights_.data(s + "q_b_proj.weight");
    } else {
      a.q = weights_.data(s + "q_proj.weight");
    }
    a.kv_a = weights_.data(s + "kv_a_proj_with_mqa.weight");
    a.kv_a_bias = weights_.data_or_null(s + "kv_a_proj_with_mqa.bias");
    a.kv_a_norm = weights_.data(s + "kv_a_layernorm.weight");
    a.kv_b = weights_.data(s + "kv_b_proj.weight");
    a.o = weights_.data(s + "o_proj.weight");
    a.o_bias = weights_.data_or_null(s + "o_proj.bias");
    layer.is_moe = c.is_moe_layer(l);
    if (layer.is_moe) {
      layer.moe.router = weights_.data(p + "mlp.gate.weight");
      layer.moe.correction_bias = weights_.data_or_null(p + "mlp.gate.e_score_correction_bias");
      // Under expert parallelism a rank loads only the experts it owns; the others stay unresolved.
      for (int64_t e = 0; e < c.n_routed_experts; ++e) {
        const std::string prefix = fmt::format("{}mlp.experts.{}", p, e);
        layer.moe.experts.push_back(weights_.data_or_null(prefix + ".gate_proj.weight") != nullptr
                                        ? resolve_mlp(prefix, c.moe_intermediate_size)
                                        : Mlp{});
      }
      layer.moe.has_shared = c.n_shared_experts > 0;
      if (layer.moe.has_shared)
        layer.moe.shared = resolve_mlp(p + "mlp.shared_experts", c.moe_intermediate_size * c.n_shared_experts);
    } else {
      layer.mlp = resolve_mlp(p + "mlp", c.intermediate_size);
    }
    layers_.push_back(std::move(layer));
  }
}

DeepseekModel::Mlp DeepseekModel::resolve_mlp(const std::string& prefix, int64_t intermediate) const {
  Mlp mlp;
  mlp.gate = weights_.data(prefix + ".gate_proj.weight");
  mlp.gate_bias = weights_.data_or_null(prefix + ".gate_proj.bias");
  mlp.up = weights_.data(prefix + ".up_proj.weight");
  mlp.up_bias = weights_.data_or_null(prefix + ".up_proj.bias");
  mlp.down = weights_.data(prefix + ".down_proj.weight");
  mlp.down_bias = weights_.data_or_null(prefix + ".down_proj.bias");
  mlp.intermediate = intermediate;
  return mlp;
}

std::unique_ptr<KvCache> DeepseekModel::make_kv_cache(int64_t num_blocks) const {
  return std::make_unique<MlaKvCache>(config_.num_hidden_layers, num_blocks, config_.kv_lora_rank,
                                      config_.qk_rope_head_dim);
}

bool DeepseekModel::has_expert(int64_t moe_layer_idx, int64_t expert) const {
  return layers_[moe_layer_idx + config_.first_k_dense_replace].moe.experts[expert].gate != nullptr;
}

void DeepseekModel::compute_expert(int64_t moe_layer_idx, int64_t expert, const float* x, int64_t n, float* out) const {
  DI_CHECK(has_expert(moe_layer_idx, expert), "expert {} of MoE layer {} is not loaded on this rank", expert,
           moe_layer_idx);
  dense_mlp(layers_[moe_layer_idx + config_.first_k_dense_replace].moe.experts[expert], x, out, n);
}

std::vector<float> DeepseekModel::export_expert(int64_t moe_layer_idx, int64_t expert) const {
  DI_CHECK(has_expert(moe_layer_idx, expert), "expert {} of MoE layer {} is not on this rank", expert, moe_layer_idx);
  const Mlp& w = layers_[moe_layer_idx + config_.first_k_dense_replace].moe.experts[expert];
  const int64_t n = config_.moe_intermediate_size * config_.hidden_size;
  std::vector<float> out(3 * n);
  std::copy_n(w.gate, n, out.begin());
  std::copy_n(w.up, n, out.begin() + n);
  std::copy_n(w.down, n, out.begin() + 2 * n);
  return out;
}

void DeepseekModel::import_expert(int64_t moe_layer_idx, int64_t expert, std::span<const float> weights) {
  const int64_t layer = moe_layer_idx + config_.first_k_dense_replace;
  const int64_t I = config_.moe_intermediate_size, H = config_.hidden_size;
  DI_CHECK(static_cast<int64_t>(weights.size()) == 3 * I * H, "expert weights of {} floats, expected {}", weights.size(),
           3 * I * H);
  const std::string prefix = fmt::format("model.layers.{}.mlp.experts.{}", layer, expert);
  const char* names[3] = {".gate_proj.weight", ".up_proj.weight", ".down_proj.weight"};
  const Shape shapes[3] = {{I, H}, {I, H}, {H, I}};
  for (int i = 0; i < 3; ++i) {
    Tensor t = Tensor::zeros(shapes[i]);
    std::copy_n(weights.data() + i * I * H, I * H, t.data<float>());
    weights_.set(prefix + names[i], std::move(t));
  }
  layers_[layer].moe.experts[expert] = resolve_mlp(prefix, I);
}

void DeepseekModel::drop_expert(int64_t moe_layer_idx, int64_t expert) {
  const int64_t layer = moe_layer_idx + config_.first_k_dense_replace;
  const std::string prefix = fmt::format("model.layers.{}.mlp.experts.{}", layer, expert);
  layers_[layer].moe.experts[expert] = Mlp{};
  for (const char* name : {".gate_proj.weight", ".up_proj.weight", ".down_proj.weight"}) weights_.erase(prefix + name);
}

Tensor DeepseekModel::forward(const ForwardBatch& batch, KvCache& kv_cache, ExpertExecutor* experts) const {
  auto* host_cache = dynamic_cast<MlaKvCache*>(&kv_cache);
  DI_CHECK(host_cache != nullptr, "the CPU model needs a host MLA cache");
  MlaKvCache& cache = *host_cache;
  LocalExpertExecutor local_experts;
  ExpertExecutor& executor = experts != nullptr ? *experts : local_experts;
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const int64_t H = c.hidden_size;
  check_batch(batch, c.vocab_size);
  const std::vector<int32_t> positions = batch.positions();
  const int64_t half = rotary_.half_dim();
  std::vector<float> cos(T * half), sin(T * half);
  rotary_.fill(positions.data(), T, cos.data(), sin.data());

  // The CPU blocks of the shared layer loop (deepseek_layers.h). The final norm is left to the head, which
  // normalises only the rows whose logits are wanted.
  struct CpuBlocks {
    const DeepseekModel& model;
    const ForwardBatch& batch;
    const int32_t* positions;
    const float* cos;
    const float* sin;
    MlaKvCache& cache;
    ExpertExecutor& executor;
    int64_t T, H;
    std::vector<float> x = std::vector<float>(T * H), h = std::vector<float>(T * H), delta = std::vector<float>(T * H);

    const ModelConfig& c() const { return model.config_; }
    void embed() { cpu::embedding(model.embed_, batch.token_ids.data(), x.data(), T, H); }
    void begin_layer(int64_t) {}
    void add_norm(bool add_delta, NormSite site) {
      if (add_delta) cpu::axpy(1.0f, delta.data(), x.data(), T * H);
      if (site.kind == NormSite::kFinal) return;
      const DeepseekModel::Layer& layer = model.layers_[site.layer];
      const float* w = site.kind == NormSite::kInput ? layer.input_norm : layer.post_attention_norm;
      cpu::rms_norm(x.data(), w, h.data(), T, H, c().rms_norm_eps);
    }
    void attention(int64_t l) {
      model.attention(l, model.layers_[l].attention, batch, positions, cos, sin, h.data(), delta.data(), cache);
    }
    bool moe(int64_t l, NormSite) {
      model.moe(l - c().first_k_dense_replace, model.layers_[l].moe, h.data(), delta.data(), T, executor);
      return false;
    }
    void mlp(int64_t l) { model.dense_mlp(model.layers_[l].mlp, h.data(), delta.data(), T); }
    Tensor head() {
      return cpu_final_logits(batch, x.data(), model.final_norm_, model.lm_head_, H, c().vocab_size, c().rms_norm_eps);
    }
  };
  CpuBlocks blocks{*this, batch, positions.data(), cos.data(), sin.data(), cache, executor, T, H};
  return run_deepseek_layers(c, blocks);
}

}  // namespace deepinfer
