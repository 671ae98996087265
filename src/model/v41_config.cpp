#include "src/model/v41_config.h"

#include <algorithm>
#include <limits>

#include "src/core/check.h"
#include "src/model/architectures.h"

namespace deepinfer {

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

bool contains(const std::vector<int64_t>& ids, int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The released 40-layer schedule, and the same pattern scaled to other depths (2 window-only layers, a ratio-2
// encoder block, a ratio-1 decoder block), as transformers fills an absent compress_ratios.
std::vector<int64_t> default_compress_ratios(int64_t layers) {
  const int64_t window_only = std::min<int64_t>(2, layers);
  const int64_t encoder = layers == 40 ? 18 : std::max<int64_t>(0, (layers - window_only + 1) / 2);
  std::vector<int64_t> ratios(window_only, 0);
  ratios.insert(ratios.end(), encoder, 2);
  ratios.insert(ratios.end(), std::max<int64_t>(0, layers - window_only - encoder), 1);
  return ratios;
}

const std::vector<int64_t> kReleasedKvSources = {2, 8, 14, 20};
const std::vector<int64_t> kReleasedIndexSources = {2, 8, 14, 20, 24, 28, 32, 36};

V41Quantization parse_quantization(const nlohmann::json& root, const std::string& source) {
  V41Quantization q;
  if (!root.contains("quantization_config") || root["quantization_config"].is_null()) return q;
  const ConfigReader reader(root["quantization_config"], source + " quantization_config");
  q.method = reader.get_string("quant_method", "");
  DI_INPUT_CHECK(q.method == "fp8", "{}: quantization_config.quant_method '{}' is not supported (fp8 is)", source,
                 q.method);
  const std::vector<int64_t> block = reader.get_int_list("weight_block_size", 1, 4096);
  if (block.size() != 2) reader.fail("weight_block_size", "must be [rows, cols]");
  q.block_rows = block[0];
  q.block_cols = block[1];
  q.scale_format = reader.get_string("scale_fmt", "ue8m0");
  DI_INPUT_CHECK(q.scale_format == "ue8m0", "{}: quantization_config.scale_fmt '{}' is not supported (ue8m0 is)",
                 source, q.scale_format);
  q.expert_dtype = reader.get_string("expert_dtype", "fp8");
  DI_INPUT_CHECK(q.expert_dtype == "fp8" || q.expert_dtype == "fp4",
                 "{}: quantization_config.expert_dtype '{}' is not supported (fp8, fp4)", source, q.expert_dtype);
  return q;
}

}  // namespace

V41TextConfig parse_v41_config(const nlohmann::json& root, const std::string& source) {
  DI_INPUT_CHECK(root.contains("text_config") && root["text_config"].is_object(),
                 "{}: model_type deepseek_v41 needs a 'text_config' object", source);
  const ConfigReader r(root["text_config"], source + " text_config");
  V41TextConfig c;
  c.vocab_size = r.get_int("vocab_size", 1, kMaxInt);
  c.hidden_size = r.get_int("hidden_size", 1, kMaxInt);
  c.num_hidden_layers = r.get_int("num_hidden_layers", 1, 4096);
  c.num_nextn_predict_layers = r.get_int("num_nextn_predict_layers", 0, 64, 0);
  c.num_attention_heads = r.get_int("num_attention_heads", 1, 4096);
  c.head_dim = r.get_int("head_dim", 1, 65536);
  c.qk_rope_head_dim = r.get_int("qk_rope_head_dim", 0, c.head_dim);
  if (c.qk_rope_head_dim % 2 != 0) r.fail("qk_rope_head_dim", "must be even (RoPE rotates pairs)");
  c.q_lora_rank = r.get_int("q_lora_rank", 1, kMaxInt);
  c.o_lora_rank = r.get_int("o_lora_rank", 1, kMaxInt);
  c.o_groups = r.get_int("o_groups", 1, c.num_attention_heads);
  if (c.num_attention_heads % c.o_groups != 0) r.fail("o_groups", "must divide num_attention_heads");
  c.sliding_window = r.get_int("sliding_window", 1, kMaxInt);

  // Layer schedules, with transformers' defaults and checks (DeepseekV41TextConfig.__post_init__).
  const int64_t layers = c.num_hidden_layers, nextn = c.num_nextn_predict_layers;
  c.compress_ratios = r.has("compress_ratios") ? r.get_int_list("compress_ratios", 0, kMaxInt)
                                               : default_compress_ratios(layers);
  const auto given = static_cast<int64_t>(c.compress_ratios.size());
  if (given < layers || given > layers + nextn)
    r.fail("compress_ratios", fmt::format("has {} entries; it needs num_hidden_layers ({}) to num_hidden_layers + "
                                          "num_nextn_predict_layers ({})", given, layers, layers + nextn));
  c.compress_ratios.resize(layers + nextn, 0);  // the draft layers are window-only
  const std::vector<int64_t> backbone(c.compress_ratios.begin(), c.compress_ratios.begin() + layers);
  const std::vector<int64_t> released = default_compress_ratios(40);
  const bool released_schedule = layers <= 40 && std::equal(backbone.begin(), backbone.end(), released.begin());

  if (r.has("kv_source_layer_ids")) {
    c.kv_source_layer_ids = r.get_int_list("kv_source_layer_ids", 0, layers - 1);
  } else if (released_schedule) {
    c.kv_source_layer_ids = kReleasedKvSources;
  } else {  // the first layer of each run of one nonzero ratio publishes for its run
    for (int64_t i = 0; i < layers; ++i)
      if (backbone[i] > 0 && (i == 0 || backbone[i - 1] != backbone[i])) c.kv_source_layer_ids.push_back(i);
  }
  if (r.has("index_source_layer_ids"))
    c.index_source_layer_ids = r.get_int_list("index_source_layer_ids", 0, layers - 1);
  else
    c.index_source_layer_ids =
        c.kv_source_layer_ids == kReleasedKvSources ? kReleasedIndexSources : c.kv_source_layer_ids;
  const std::vector<int64_t>& kv = c.kv_source_layer_ids;
  for (const int64_t id : kv)
    if (backbone[id] == 0)
      r.fail("kv_source_layer_ids", fmt::format("names layer {}, whose compress_ratio is 0 (no compressor)", id));
  for (const int64_t id : c.index_source_layer_ids) {
    if (backbone[id] == 0)
      r.fail("index_source_layer_ids", fmt::format("names layer {}, whose compress_ratio is 0", id));
    if (!std::any_of(kv.begin(), kv.end(), [id](int64_t s) { return s <= id; }))
      r.fail("index_source_layer_ids", fmt::format("names layer {}, with no KV source at or before it", id));
  }
  for (int64_t i = 0; i < layers; ++i)
    if (backbone[i] > 0 && !std::any_of(kv.begin(), kv.end(), [i](int64_t s) { return s <= i; }))
      r.fail("kv_source_layer_ids", fmt::format("leaves layer {} (compress_ratio {}) with no source at or before it",
                                                i, backbone[i]));
  // Negative disables the two-level top-k; absent means the last KV source.
  c.candidate_source_layer_id = std::max<int64_t>(
      -1, r.get_int("candidate_source_layer_id", -kMaxInt, layers - 1, kv.empty() ? -1 : kv.back()));
  if (c.candidate_source_layer_id >= 0 && !contains(c.index_source_layer_ids, c.candidate_source_layer_id))
    r.fail("candidate_source_layer_id", fmt::format("= {} is not one of index_source_layer_ids",
                                                    c.candidate_source_layer_id));
  c.engram_layer_ids = r.get_int_list("engram_layer_ids", 0, layers - 1);
  const std::vector<int64_t> engram_rows =
      r.get_int_list("engram_num_embeddings", 0, std::numeric_limits<int64_t>::max());
  if (r.has("engram_num_embeddings") && engram_rows.size() != c.engram_layer_ids.size())
    r.fail("engram_num_embeddings", fmt::format("has {} entries for {} engram layers", engram_rows.size(),
                                                c.engram_layer_ids.size()));
  c.candidate_topk_blocks = r.get_int("candidate_topk_blocks", 1, kMaxInt, 2048);
  c.candidate_block_size = r.get_int("candidate_block_size", 1, kMaxInt, 8);
  c.index_n_heads = r.get_int("index_n_heads", 1, 4096, 32);
  c.index_head_dim = r.get_int("index_head_dim", 1, 65536, 128);
  c.index_topk = r.get_int("index_topk", 1, kMaxInt, 512);

  c.hc_mult = r.get_int("hc_mult", 1, 64, 1);
  c.hc_sinkhorn_iters = r.get_int("hc_sinkhorn_iters", 0, 1000, 20);
  c.hc_eps = r.get_double("hc_eps", 0.0, 1.0, 1e-6);

  c.n_routed_experts = r.get_int("n_routed_experts", 1, 65536);
  c.n_shared_experts = r.get_int("n_shared_experts", 0, 64, 0);
  c.num_experts_per_tok = r.get_int("num_experts_per_tok", 1, c.n_routed_experts);
  c.moe_intermediate_size = r.get_int("moe_intermediate_size", 1, kMaxInt);
  c.gate_temp = r.get_double("gate_temp", 1e-6, 1e6, 1.0);
  c.scoring_func = r.get_string("scoring_func", "sqrtsoftplus");
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "sigmoid" && c.scoring_func != "softmax")
    r.fail("scoring_func", fmt::format("= '{}' is not one of sqrtsoftplus, sigmoid, softmax", c.scoring_func));
  c.topk_method = r.get_string("topk_method", "noaux_tc");
  c.norm_topk_prob = r.get_bool("norm_topk_prob", true);
  c.routed_scaling_factor = r.get_double("routed_scaling_factor", 0.0, 1e6, 1.0);
  c.swiglu_limit = r.get_double("swiglu_limit", 0.0, 1e9, 0.0);
  c.rms_norm_eps = r.get_double("rms_norm_eps", 0.0, 1.0, 1e-6);
  c.rope_theta = r.get_double("rope_theta", 1.0, 1e12, 10000.0);
  c.compress_rope_theta = r.get_double("compress_rope_theta", 1.0, 1e12, c.rope_theta);
  c.quantization = parse_quantization(root, source);
  return c;
}

}  // namespace deepinfer
