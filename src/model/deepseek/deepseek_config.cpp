#include "src/model/deepseek/deepseek_config.h"

#include <fmt/format.h>

#include "src/core/check.h"

namespace deepinfer {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

// RoPE from either transformers 5's "rope_parameters" or the public checkpoints' "rope_scaling" + "rope_theta".
RopeConfig parse_rope(const ConfigReader& r) {
  RopeConfig rope;
  rope.theta = r.get_double("rope_theta", 1.0, 1e12, 10000.0);
  const char* key = r.has("rope_parameters") ? "rope_parameters" : (r.has("rope_scaling") ? "rope_scaling" : nullptr);
  if (key == nullptr) return rope;
  const nlohmann::json& params = r.json().at(key);
  if (!params.is_object()) r.fail(key, "must be an object");
  const ConfigReader p(params, r.source() + " " + key);
  rope.theta = p.get_double("rope_theta", 1.0, 1e12, rope.theta);
  const std::string type = p.get_string("rope_type", p.get_string("type", "default"));
  if (type == "default") return rope;
  if (type != "yarn") p.fail("rope_type", fmt::format("'{}' is not supported (default, yarn)", type));
  rope.yarn = true;
  rope.factor = p.get_double("factor", 1.0, 1e6, 1.0);
  rope.original_max_position_embeddings = p.get_int("original_max_position_embeddings", 1, kMaxDim * 64);
  // transformers treats 0/None beta as the default
  rope.beta_fast = p.get_double("beta_fast", 0.0, 1e6, 32.0);
  rope.beta_slow = p.get_double("beta_slow", 0.0, 1e6, 1.0);
  if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
  if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
  rope.mscale = p.get_double("mscale", 0.0, 1e6, 0.0);
  rope.mscale_all_dim = p.get_double("mscale_all_dim", 0.0, 1e6, 0.0);
  rope.attention_factor = p.get_double("attention_factor", 0.0, 1e6, 0.0);
  rope.truncate = p.get_bool("truncate", true);
  return rope;
}

// Keys shared by the DeepSeek V2/V3 family (MLA + DeepSeekMoE).
void parse_deepseek_common(const ConfigReader& r, ModelConfig& c) {
  c.vocab_size = r.get_int("vocab_size", 1, kMaxDim);
  c.hidden_size = r.get_int("hidden_size", 1, kMaxDim);
  c.intermediate_size = r.get_int("intermediate_size", 1, kMaxDim);
  c.num_hidden_layers = r.get_int("num_hidden_layers", 1, 4096);
  c.num_attention_heads = r.get_int("num_attention_heads", 1, 4096);
  const int64_t kv_heads = r.get_int("num_key_value_heads", 1, 4096, c.num_attention_heads);
  if (kv_heads != c.num_attention_heads)
    r.fail("num_key_value_heads", "must equal num_attention_heads for MLA");
  c.max_position_embeddings = r.get_int("max_position_embeddings", 1, kMaxDim * 64);
  c.rms_norm_eps = static_cast<float>(r.get_double("rms_norm_eps", 1e-12, 1.0, 1e-6));
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  c.attention_bias = r.get_bool("attention_bias", false);
  c.mlp_bias = r.get_bool("mlp_bias", false);
  if (r.get_string("hidden_act", "silu") != "silu") r.fail("hidden_act", "must be 'silu'");

  c.q_lora_rank = r.get_int("q_lora_rank", 1, kMaxDim, 0);
  c.kv_lora_rank = r.get_int("kv_lora_rank", 1, kMaxDim);
  c.qk_nope_head_dim = r.get_int("qk_nope_head_dim", 0, kMaxDim);
  c.qk_rope_head_dim = r.get_int("qk_rope_head_dim", 2, kMaxDim);
  if (c.qk_rope_head_dim % 2 != 0) r.fail("qk_rope_head_dim", "must be even");
  c.v_head_dim = r.get_int("v_head_dim", 1, kMaxDim);
  c.rope = parse_rope(r);

  c.n_routed_experts = r.get_int("n_routed_experts", 0, 1 << 16, 0);
  c.first_k_dense_replace = r.get_int("first_k_dense_replace", 0, c.num_hidden_layers, 0);
  if (r.get_int("moe_layer_freq", 1, 1 << 16, 1) != 1) r.fail("moe_layer_freq", "other than 1 is not supported");
  if (c.n_routed_experts > 0) {
    c.moe_intermediate_size = r.get_int("moe_intermediate_size", 1, kMaxDim);
    c.n_shared_experts = r.get_int("n_shared_experts", 0, 1 << 16, 0);
    c.num_experts_per_tok = r.get_int("num_experts_per_tok", 1, c.n_routed_experts);
    c.n_group = r.get_int("n_group", 1, c.n_routed_experts, 1);
    if (c.n_routed_experts % c.n_group != 0)
      r.fail("n_group", fmt::format("= {} does not divide n_routed_experts {}", c.n_group, c.n_routed_experts));
    c.topk_group = r.get_int("topk_group", 1, c.n_group, 1);
    c.routed_scaling_factor = r.get_double("routed_scaling_factor", 0.0, 1e6, 1.0);
    if (c.topk_group * (c.n_routed_experts / c.n_group) < c.num_experts_per_tok)
      r.fail("topk_group", fmt::format("= {} groups of {} experts hold fewer than num_experts_per_tok = {}", c.topk_group,
                                       c.n_routed_experts / c.n_group, c.num_experts_per_tok));
  }
  c.num_nextn_predict_layers = r.get_int("num_nextn_predict_layers", 0, 16, 0);

  if (r.has("eos_token_id")) {
    const auto& eos = r.json().at("eos_token_id");
    if (eos.is_array()) {
      for (const auto& id : eos) c.eos_token_ids.push_back(id.get<int64_t>());
    } else {
      c.eos_token_ids.push_back(r.get_int("eos_token_id", 0, c.vocab_size - 1));
    }
  }
  if (r.has("quantization_config")) {
    const nlohmann::json& q = r.json().at("quantization_config");
    const ConfigReader qr(q, r.source() + " quantization_config");
    if (qr.get_string("quant_method", "") != "fp8")
      qr.fail("quant_method", "is not 'fp8': only FP8 e4m3 block-scaled checkpoints are read");
    if (qr.get_string("fmt", "e4m3") != "e4m3") qr.fail("fmt", "must be 'e4m3'");
    if (qr.has("expert_dtype") && qr.get_string("expert_dtype", "") != "fp8")
      qr.fail("expert_dtype", "is not supported for this architecture (FP4 experts are a V4.x format)");
    c.quantization.fp8 = true;
    if (qr.has("weight_block_size")) {
      const auto& block = q.at("weight_block_size");
      if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() || !block[1].is_number_integer() ||
          block[0].get<int64_t>() <= 0 || block[1].get<int64_t>() <= 0)
        qr.fail("weight_block_size", "must be two positive integers");
      c.quantization.block_rows = block[0].get<int64_t>();
      c.quantization.block_cols = block[1].get<int64_t>();
    }
    c.quantization.ue8m0_scales = qr.get_string("scale_fmt", "") == "ue8m0";
  }
}

}  // namespace

void parse_deepseek_v2(const ConfigReader& r, ModelConfig& c) {
  parse_deepseek_common(r, c);
  c.rope.interleaved = true;  // transformers' V2 rotates complex pairs
  if (c.n_routed_experts == 0) return;
  if (r.get_string("scoring_func", "softmax") != "softmax") r.fail("scoring_func", "must be 'softmax' for deepseek_v2");
  c.scoring = RouterScoring::kSoftmax;
  const std::string method = r.get_string("topk_method", "greedy");
  if (method == "greedy") c.group_score = GroupScore::kNone;
  else if (method == "group_limited_greedy") c.group_score = GroupScore::kMax;
  else r.fail("topk_method", fmt::format("'{}' is not supported for deepseek_v2 (greedy, group_limited_greedy)", method));
  c.norm_topk_prob = r.get_bool("norm_topk_prob", false);
}

void parse_deepseek_v3(const ConfigReader& r, ModelConfig& c) {
  parse_deepseek_common(r, c);
  c.rope.interleaved = r.get_bool("rope_interleave", true);
  if (c.n_routed_experts == 0) return;
  if (r.get_string("scoring_func", "sigmoid") != "sigmoid") r.fail("scoring_func", "must be 'sigmoid' for deepseek_v3");
  if (r.get_string("topk_method", "noaux_tc") != "noaux_tc") r.fail("topk_method", "must be 'noaux_tc' for deepseek_v3");
  c.scoring = RouterScoring::kSigmoid;
  c.group_score = GroupScore::kTop2Sum;
  c.has_correction_bias = true;
  c.norm_topk_prob = r.get_bool("norm_topk_prob", true);
  if (c.n_routed_experts / c.n_group < 2) r.fail("n_group", "leaves fewer than 2 experts per group (top-2 group score)");
}

namespace {

void add_linear(std::vector<TensorSpec>& specs, const std::string& prefix, int64_t out, int64_t in, bool bias) {
  specs.push_back({prefix + ".weight", {out, in}});
  if (bias) specs.push_back({prefix + ".bias", {out}});
}

void add_mlp(std::vector<TensorSpec>& specs, const std::string& prefix, int64_t hidden, int64_t inter, bool bias) {
  add_linear(specs, prefix + ".gate_proj", inter, hidden, bias);
  add_linear(specs, prefix + ".up_proj", inter, hidden, bias);
  add_linear(specs, prefix + ".down_proj", hidden, inter, bias);
}

}  // namespace

std::vector<TensorSpec> deepseek_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  const int64_t h = c.hidden_size;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  specs.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_layers_with_mtp(); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const size_t first_of_layer = specs.size();
    specs.push_back({p + "input_layernorm.weight", {h}});
    specs.push_back({p + "post_attention_layernorm.weight", {h}});
    const int64_t heads = c.num_attention_heads;
    if (c.q_lora_rank > 0) {
      add_linear(specs, p + "self_attn.q_a_proj", c.q_lora_rank, h, c.attention_bias);
      specs.push_back({p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}});
      add_linear(specs, p + "self_attn.q_b_proj", heads * c.qk_head_dim(), c.q_lora_rank, false);
    } else {
      add_linear(specs, p + "self_attn.q_proj", heads * c.qk_head_dim(), h, false);
    }
    add_linear(specs, p + "self_attn.kv_a_proj_with_mqa", c.kv_entry_dim(), h, c.attention_bias);
    specs.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}});
    add_linear(specs, p + "self_attn.kv_b_proj", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, false);
    add_linear(specs, p + "self_attn.o_proj", h, heads * c.v_head_dim, c.attention_bias);
    if (c.is_moe_layer(l)) {
      specs.push_back({p + "mlp.gate.weight", {c.n_routed_experts, h}});
      if (c.has_correction_bias) specs.push_back({p + "mlp.gate.e_score_correction_bias", {c.n_routed_experts}});
      for (int64_t e = 0; e < c.n_routed_experts; ++e)
        add_mlp(specs, fmt::format("{}mlp.experts.{}", p, e), h, c.moe_intermediate_size, false);
      if (c.n_shared_experts > 0)
        add_mlp(specs, p + "mlp.shared_experts", h, c.moe_intermediate_size * c.n_shared_experts, c.mlp_bias);
    } else {
      add_mlp(specs, p + "mlp", h, c.intermediate_size, c.mlp_bias);
    }
    if (l >= c.num_hidden_layers) {  // MTP module (DeepSeek's layout): loaded for speculative decoding
      specs.push_back({p + "enorm.weight", {h}});
      specs.push_back({p + "hnorm.weight", {h}});
      specs.push_back({p + "eh_proj.weight", {h, 2 * h}});
      specs.push_back({p + "shared_head.norm.weight", {h}});
      specs.push_back({p + "shared_head.head.weight", {c.vocab_size, h}});
      for (size_t i = first_of_layer; i < specs.size(); ++i) specs[i].optional_part = "the MTP layers";
    }
  }
  return specs;
}

std::optional<std::pair<int64_t, int64_t>> deepseek_routed_expert(const std::string& name) {
  return routed_expert_in(name, "model.layers.%d.mlp.experts.%d.");
}

nlohmann::json deepseek_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source, bool) {
  const int64_t layers = root.value("num_hidden_layers", int64_t{0});
  DI_INPUT_CHECK(num_layers <= layers, "--num-layers {}: {} has {} layers", num_layers, source, layers);
  root["num_hidden_layers"] = num_layers;
  return root;
}

}  // namespace deepinfer
