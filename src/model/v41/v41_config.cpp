#include "src/model/v41/v41_config.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <utility>

#include "src/core/check.h"
#include "src/model/architectures.h"
#include "src/model/model_config.h"

namespace deepinfer {

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
// Bounds on the config's sizes, checked before any arithmetic with them, so that no product used for an
// allocation or an offset can wrap int64 and an absurd size is refused by its key rather than met as a bare
// bad_alloc, a zero-size table or a search that never ends.
constexpr int64_t kMaxDim = int64_t{1} << 24;  // one dimension, as V2/V3's configs (the released ones: 129,280)
constexpr int64_t kMaxTopk = int64_t{1} << 16;  // index_topk and the candidate blocks (rows x k stay in int32)
constexpr int64_t kMaxPositions = int64_t{1} << 30;
// One tensor: 2^38 values (1 TiB in fp32); the released engram tables hold 2^36.5 each.
constexpr int64_t kMaxTensorValues = int64_t{1} << 38;
// engram_vocab_size: the bucket primes above it are found by trial division up to their square roots.
constexpr int64_t kMaxEngramVocab = int64_t{1} << 32;
// Distinct bucket primes over all engram layers (the released config has 48).
constexpr int64_t kMaxEngramPrimes = int64_t{1} << 16;

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

// A tensor of the product of `factors` (each named by its keys) values, refused above kMaxTensorValues. Division
// keeps the check itself from wrapping.
void check_tensor_values(const ConfigReader& r, std::string_view tensor,
                         std::initializer_list<std::pair<std::string_view, int64_t>> factors) {
  int64_t values = 1;
  bool over = false;
  std::string named;
  for (const auto& [keys, size] : factors) {
    named += fmt::format("{}{} ({})", named.empty() ? "" : " x ", keys, size);
    if (over || size == 0) continue;
    if (values > kMaxTensorValues / size) over = true;
    else values *= size;
  }
  if (over)
    throw InputError(fmt::format("{}: {} make the tensor {} hold more than the 2^38 = {} values one tensor may hold; "
                                 "lower them", r.source(), named, tensor, kMaxTensorValues));
}

// Every tensor shaped by the config (v41_tensor_specs' shapes), as products of its keys.
void check_tensor_sizes(const ConfigReader& r, const V41TextConfig& c) {
  const int64_t hc = c.hc_mult, H = c.hidden_size;
  check_tensor_values(r, "embed.weight", {{"vocab_size", c.vocab_size}, {"hidden_size", H}});
  check_tensor_values(r, "attn.wq_b.weight", {{"num_attention_heads", c.num_attention_heads},
                                              {"head_dim", c.head_dim}, {"q_lora_rank", c.q_lora_rank}});
  check_tensor_values(r, "attn.wo_a.weight", {{"o_lora_rank", c.o_lora_rank},
                                              {"num_attention_heads", c.num_attention_heads},
                                              {"head_dim", c.head_dim}});
  check_tensor_values(r, "attn.wo_b.weight", {{"hidden_size", H}, {"o_groups", c.o_groups},
                                              {"o_lora_rank", c.o_lora_rank}});
  check_tensor_values(r, "hc_attn_fn", {{"(2 + hc_mult) x hc_mult^2", (2 + hc) * hc * hc}, {"hidden_size", H}});
  check_tensor_values(r, "ffn.experts.N.w1.weight", {{"moe_intermediate_size", c.moe_intermediate_size},
                                                     {"hidden_size", H}});
  check_tensor_values(r, "ffn.gate.weight", {{"n_routed_experts", c.n_routed_experts}, {"hidden_size", H}});
  check_tensor_values(r, "attn.indexer.wq_b.weight", {{"index_n_heads", c.index_n_heads},
                                                      {"index_head_dim", c.index_head_dim},
                                                      {"q_lora_rank", c.q_lora_rank}});
  check_tensor_values(r, "attn.wkv.weight", {{"head_dim", c.head_dim}, {"hidden_size", H}});
  if (c.engram_layer_ids.empty()) return;
  check_tensor_values(r, "engram.wkv.weight", {{"hc_mult + 1", hc + 1}, {"hidden_size", H},
                                               {"(engram_max_ngram_size - 1) x engram_n_heads", v41_engram_columns(c)},
                                               {"engram_head_dim", c.engram_head_dim}});
}

// The engram tables' sizes, before the bucket primes are searched for or any row offset is computed.
void check_engram_sizes(const ConfigReader& r, const V41TextConfig& c) {
  std::vector<int64_t> layers = c.engram_layer_ids;
  std::sort(layers.begin(), layers.end());
  if (const auto twice = std::adjacent_find(layers.begin(), layers.end()); twice != layers.end())
    r.fail("engram_layer_ids", fmt::format("names layer {} twice", *twice));
  const int64_t columns = v41_engram_columns(c);
  const auto primes = static_cast<int64_t>(layers.size()) * columns;
  if (primes > kMaxEngramPrimes)
    r.fail("engram_layer_ids", fmt::format("has {} layers of {} bucket ranges ((engram_max_ngram_size - 1) x "
                                           "engram_n_heads): {} distinct primes, more than the {} allowed",
                                           layers.size(), columns, primes, kMaxEngramPrimes));
  for (size_t e = 0; e < c.engram_layer_ids.size(); ++e) {
    const int64_t rows = c.engram_num_embeddings[e];
    if (rows > kMaxTensorValues / c.engram_head_dim)
      r.fail("engram_num_embeddings", fmt::format("gives layer {} {} rows of engram_head_dim {} values: more than the "
                                                  "2^38 = {} values one table may hold", c.engram_layer_ids[e], rows,
                                                  c.engram_head_dim, kMaxTensorValues));
    // Each bucket range is a prime of at least engram_vocab_size rows, so a table of fewer than columns x
    // engram_vocab_size rows cannot hold them: refused before the prime search runs for nothing.
    if (rows / columns < c.engram_vocab_size)
      r.fail("engram_vocab_size", fmt::format("= {}: engram layer {}'s {} bucket ranges, each a prime of at least "
                                              "engram_vocab_size rows, need more than the {} rows its table has "
                                              "(engram_num_embeddings)", c.engram_vocab_size, c.engram_layer_ids[e],
                                              columns, rows));
  }
}

}  // namespace

V41TextConfig parse_v41_config(const nlohmann::json& root, const std::string& source) {
  DI_INPUT_CHECK(root.contains("text_config") && root["text_config"].is_object(),
                 "{}: model_type deepseek_v41 needs a 'text_config' object", source);
  const ConfigReader r(root["text_config"], source + " text_config");
  V41TextConfig c;
  c.vocab_size = r.get_int("vocab_size", 1, kMaxDim);
  c.hidden_size = r.get_int("hidden_size", 1, kMaxDim);
  c.num_hidden_layers = r.get_int("num_hidden_layers", 1, 4096);
  c.num_nextn_predict_layers = r.get_int("num_nextn_predict_layers", 0, 64, 0);
  c.num_attention_heads = r.get_int("num_attention_heads", 1, 4096);
  c.head_dim = r.get_int("head_dim", 1, 65536);
  c.qk_rope_head_dim = r.get_int("qk_rope_head_dim", 0, c.head_dim);
  if (c.qk_rope_head_dim % 2 != 0) r.fail("qk_rope_head_dim", "must be even (RoPE rotates pairs)");
  c.q_lora_rank = r.get_int("q_lora_rank", 1, kMaxDim);
  c.o_lora_rank = r.get_int("o_lora_rank", 1, kMaxDim);
  c.o_groups = r.get_int("o_groups", 1, c.num_attention_heads);
  if (c.num_attention_heads % c.o_groups != 0) r.fail("o_groups", "must divide num_attention_heads");
  c.sliding_window = r.get_int("sliding_window", 1, kMaxDim);

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
  c.engram_num_embeddings = r.get_int_list("engram_num_embeddings", 1, kMaxTensorValues);
  if (r.has("engram_num_embeddings") && c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    r.fail("engram_num_embeddings", fmt::format("has {} entries for {} engram layers",
                                                c.engram_num_embeddings.size(), c.engram_layer_ids.size()));
  c.engram_vocab_size = r.get_int("engram_vocab_size", 2, kMaxEngramVocab, 16000000);
  c.engram_max_ngram_size = r.get_int("engram_max_ngram_size", 2, 16, 4);
  c.engram_n_heads = r.get_int("engram_n_heads", 1, 1024, 8);
  c.engram_head_dim = r.get_int("engram_head_dim", 1, 65536, 256);
  // transformers names it engram_pad_id; the released config.json says engram_pad_token_id.
  c.engram_pad_id = r.get_int(r.has("engram_pad_id") ? "engram_pad_id" : "engram_pad_token_id", 0,
                              c.vocab_size - 1, std::min<int64_t>(2, c.vocab_size - 1));
  c.engram_compressed_vocab_size = r.get_int("engram_compressed_vocab_size", 1, kMaxInt, 99092);
  if (!c.engram_layer_ids.empty()) {
    if (!r.has("engram_num_embeddings"))
      r.fail("engram_num_embeddings", "is missing: the engram layers need their table sizes");
    if (c.engram_compressed_vocab_size > c.vocab_size)
      r.fail("engram_compressed_vocab_size", fmt::format("= {} exceeds vocab_size {}", c.engram_compressed_vocab_size,
                                                         c.vocab_size));
    check_engram_sizes(r, c);
  }
  c.candidate_topk_blocks = r.get_int("candidate_topk_blocks", 1, kMaxTopk, 2048);
  c.candidate_block_size = r.get_int("candidate_block_size", 1, kMaxTopk, 8);
  c.index_n_heads = r.get_int("index_n_heads", 1, 4096, 32);
  c.index_head_dim = r.get_int("index_head_dim", 1, 65536, 128);
  c.index_topk = r.get_int("index_topk", 1, kMaxTopk, 512);

  // Absent keys take transformers' DeepseekV41TextConfig defaults (the released checkpoint's values).
  c.hc_mult = r.get_int("hc_mult", 1, 64, 4);
  c.hc_sinkhorn_iters = r.get_int("hc_sinkhorn_iters", 0, 1000, 20);
  c.hc_eps = r.get_double("hc_eps", 0.0, 1.0, 1e-6);

  c.n_routed_experts = r.get_int("n_routed_experts", 1, 65536);
  c.n_shared_experts = r.get_int("n_shared_experts", 0, 64, 1);
  c.num_experts_per_tok = r.get_int("num_experts_per_tok", 1, c.n_routed_experts);
  c.moe_intermediate_size = r.get_int("moe_intermediate_size", 1, kMaxDim);
  c.gate_temp = r.get_double("gate_temp", 1e-6, 1e6, 1.0);
  c.scoring_func = r.get_string("scoring_func", "sqrtsoftplus");
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "sigmoid" && c.scoring_func != "softmax")
    r.fail("scoring_func", fmt::format("= '{}' is not one of sqrtsoftplus, sigmoid, softmax", c.scoring_func));
  c.topk_method = r.get_string("topk_method", "noaux_tc");
  c.norm_topk_prob = r.get_bool("norm_topk_prob", true);
  c.routed_scaling_factor = r.get_double("routed_scaling_factor", 0.0, 1e6, 1.5);
  c.swiglu_limit = r.get_double("swiglu_limit", 0.0, 1e9, 10.0);
  c.rms_norm_eps = r.get_double("rms_norm_eps", 0.0, 1.0, 1e-20);
  c.rope_theta = r.get_double("rope_theta", 1.0, 1e12, 10000.0);
  c.compress_rope_theta = r.get_double("compress_rope_theta", 1.0, 1e12, 160000.0);
  c.max_position_embeddings = r.get_int("max_position_embeddings", 1, kMaxPositions, 1048576);
  if (r.has("rope_scaling")) {
    const ConfigReader y(r.json().at("rope_scaling"), source + " text_config.rope_scaling");
    const std::string type = y.get_string("rope_type", y.get_string("type", "default"));
    if (type != "yarn" && type != "default") y.fail("rope_type", fmt::format("= '{}' (yarn or default)", type));
    c.compress_yarn = type == "yarn";
    c.yarn_factor = y.get_double("factor", 1.0, 1e6, 1.0);
    c.yarn_beta_fast = y.get_double("beta_fast", 0.0, 1e6, 32.0);
    c.yarn_beta_slow = y.get_double("beta_slow", 0.0, 1e6, 1.0);
    c.yarn_original_max_position_embeddings =
        y.get_int("original_max_position_embeddings", 1, kMaxPositions, c.max_position_embeddings);
  }
  if (r.has("eos_token_id")) {
    const nlohmann::json& eos = r.json().at("eos_token_id");
    c.eos_token_ids = eos.is_array() ? r.get_int_list("eos_token_id", 0, c.vocab_size - 1)
                                     : std::vector<int64_t>{r.get_int("eos_token_id", 0, c.vocab_size - 1)};
  }
  c.quantization = parse_quantization(root, source);
  check_tensor_sizes(r, c);
  // The drafter's keys matter to --draft dspark only: a config whose DSpark keys do not fit it (a depth cut,
  // v41_at_depth; a test config of fewer layers or a smaller vocabulary) loads without a drafter, and the reason is
  // kept for --draft dspark to give.
  if (r.has("dspark_block_size")) {
    try {
      if (nextn < 1) r.fail("dspark_block_size", "is set but num_nextn_predict_layers is 0 (DSpark needs draft layers)");
      c.dspark.target_layer_ids = r.get_int_list("dspark_target_layer_ids", 0, layers - 1);
      if (c.dspark.target_layer_ids.empty()) r.fail("dspark_target_layer_ids", "is missing or empty");
      c.dspark.noise_token_id = r.get_int("dspark_noise_token_id", 0, c.vocab_size - 1);
      c.dspark.markov_rank = r.get_int("dspark_markov_rank", 1, kMaxDim);
      check_tensor_values(r, "markov_head.markov_w1.weight", {{"vocab_size", c.vocab_size},
                                                              {"dspark_markov_rank", c.dspark.markov_rank}});
      c.dspark.n_routed_experts = r.get_int("dspark_n_routed_experts", 1, 65536, c.n_routed_experts);
      c.dspark.num_experts_per_tok = r.get_int("dspark_num_experts_per_tok", 1, c.dspark.n_routed_experts,
                                               std::min(c.num_experts_per_tok, c.dspark.n_routed_experts));
      c.dspark.block_size = r.get_int("dspark_block_size", 1, 64);
    } catch (const InputError& e) {
      c.dspark = {};
      c.dspark.unusable = e.what();
    }
  }
  return c;
}

void parse_deepseek_v41(const ConfigReader& root, ModelConfig& c) {
  c.v41 = parse_v41_config(root.json(), root.source());
  const V41TextConfig& v = c.v41;
  c.vocab_size = v.vocab_size;
  c.hidden_size = v.hidden_size;
  c.num_hidden_layers = v.num_hidden_layers;
  c.num_attention_heads = v.num_attention_heads;
  c.max_position_embeddings = v.max_position_embeddings;
  c.rms_norm_eps = static_cast<float>(v.rms_norm_eps);
  c.q_lora_rank = v.q_lora_rank;
  c.qk_rope_head_dim = v.qk_rope_head_dim;
  c.moe_intermediate_size = v.moe_intermediate_size;
  c.n_routed_experts = v.n_routed_experts;
  c.n_shared_experts = v.n_shared_experts;
  c.num_experts_per_tok = v.num_experts_per_tok;
  c.routed_scaling_factor = v.routed_scaling_factor;
  c.swiglu_limit = v.swiglu_limit;
  c.scoring = v.scoring_func == "softmax"   ? RouterScoring::kSoftmax
              : v.scoring_func == "sigmoid" ? RouterScoring::kSigmoid
                                            : RouterScoring::kSqrtSoftplus;
  c.router_temperature = v.gate_temp;
  c.norm_topk_prob = v.norm_topk_prob;
  c.first_k_dense_replace = 0;  // every layer is MoE
  c.num_nextn_predict_layers = v.num_nextn_predict_layers;
  c.eos_token_ids = v.eos_token_ids;
  if (c.eos_token_ids.empty() && root.has("eos_token_id"))
    c.eos_token_ids = root.json().at("eos_token_id").is_array()
                          ? root.get_int_list("eos_token_id", 0, v.vocab_size - 1)
                          : std::vector<int64_t>{root.get_int("eos_token_id", 0, v.vocab_size - 1)};
  if (v.quantization.method == "fp8") {  // FP8 projections (UE8M0 block scales); FP4 experts when expert_dtype says
    c.quantization.fp8 = true;
    c.quantization.block_rows = v.quantization.block_rows;
    c.quantization.block_cols = v.quantization.block_cols;
    c.quantization.ue8m0_scales = true;
    c.quantization.fp4_experts = v.quantization.expert_dtype == "fp4";
  }
}

std::vector<TensorSpec> v41_tensor_specs(const ModelConfig& c) {
  const V41TextConfig& v = c.v41;
  const int64_t H = v.hidden_size, hd = v.head_dim, hc = v.hc_mult, heads = v.num_attention_heads;
  const int64_t I = v.moe_intermediate_size, E = v.n_routed_experts;
  std::vector<TensorSpec> specs = {{"embed.weight", {v.vocab_size, H}}, {"norm.weight", {H}},
                                   {"head.weight", {v.vocab_size, H}}};
  auto expert = [&](const std::string& prefix) {
    specs.push_back({prefix + ".w1.weight", {I, H}});
    specs.push_back({prefix + ".w2.weight", {H, I}});
    specs.push_back({prefix + ".w3.weight", {I, H}});
  };
  // What every layer has, main or draft (mtp.N.): the hyper-connections, the norms, the window attention's
  // projections and sink.
  auto window_layer = [&](const std::string& p) {
    for (const char* site : {"hc_attn", "hc_ffn"}) {
      specs.push_back({p + site + "_fn", {(2 + hc) * hc, hc * H}});
      specs.push_back({p + site + "_base", {(2 + hc) * hc}});
      specs.push_back({p + site + "_scale", {3}});
    }
    specs.push_back({p + "attn_norm.weight", {H}});
    specs.push_back({p + "ffn_norm.weight", {H}});
    const std::string a = p + "attn.";
    specs.push_back({a + "wq_a.weight", {v.q_lora_rank, H}});
    specs.push_back({a + "q_norm.weight", {v.q_lora_rank}});
    specs.push_back({a + "wq_b.weight", {heads * hd, v.q_lora_rank}});
    specs.push_back({a + "wkv.weight", {hd, H}});
    specs.push_back({a + "kv_norm.weight", {hd}});
    specs.push_back({a + "wo_a.weight", {v.o_groups * v.o_lora_rank, heads * hd / v.o_groups}});
    specs.push_back({a + "wo_b.weight", {H, v.o_groups * v.o_lora_rank}});
    specs.push_back({a + "attn_sink", {heads}});
  };
  // The MoE: router and its selection bias, `experts` routed experts and the shared one.
  auto moe = [&](const std::string& p, int64_t experts) {
    specs.push_back({p + "ffn.gate.weight", {experts, H}});
    specs.push_back({p + "ffn.gate.bias", {experts}});
    for (int64_t e = 0; e < experts; ++e) expert(fmt::format("{}ffn.experts.{}", p, e));
    expert(p + "ffn.shared_experts");
  };
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    const std::string a = p + "attn.";
    window_layer(p);
    const bool kv_source = contains(v.kv_source_layer_ids, l), index_source = contains(v.index_source_layer_ids, l);
    if (kv_source) {
      specs.push_back({a + "compressor.wkv.weight", {hd, H}});
      if (v.compress_ratios[l] > 1) specs.push_back({a + "compressor.wgate.weight", {hd, H}});
      specs.push_back({a + "compressor.norm.weight", {hd}});
    }
    if (index_source) {
      specs.push_back({a + "indexer.wq_b.weight", {v.index_n_heads * v.index_head_dim, v.q_lora_rank}});
      specs.push_back({a + "indexer.weights_proj.weight", {v.index_n_heads, H}});
      if (kv_source) {
        specs.push_back({a + "indexer.wk.weight", {v.index_head_dim, hd}});
        specs.push_back({a + "indexer.k_norm.weight", {v.index_head_dim}});
      }
    }
    if (const int64_t e = v41_layer_role(v, l).engram_index; e >= 0) {
      const int64_t rows = v.engram_num_embeddings[e];
      const int64_t cols = v41_engram_columns(v), ed = v.engram_head_dim;
      specs.push_back({p + "engram.embed.weight", {rows, ed}});
      specs.push_back({p + "engram.wkv.weight", {(hc + 1) * H, cols * ed}});
      specs.push_back({p + "engram.q_weight", {hc, H}});
      specs.push_back({p + "engram.k_weight", {hc, H}});
    }
    moe(p, E);
  }
  if (v.dspark.enabled()) {  // the draft layers, as DeepSeek's checkpoints name them (mtp.N.*): loaded when present
    const size_t first = specs.size();
    const int64_t n = v.num_nextn_predict_layers, Ed = v.dspark.n_routed_experts, rank = v.dspark.markov_rank;
    for (int64_t d = 0; d < n; ++d) {
      const std::string p = fmt::format("mtp.{}.", d);
      window_layer(p);
      moe(p, Ed);
    }
    const auto targets = static_cast<int64_t>(v.dspark.target_layer_ids.size());
    specs.push_back({"mtp.0.main_proj.weight", {H, targets * H}});  // the target features' fusion
    specs.push_back({"mtp.0.main_norm.weight", {H}});
    const std::string last = fmt::format("mtp.{}.", n - 1);  // the heads, on the last draft layer
    specs.push_back({last + "hc_head_fn", {hc, hc * H}});
    specs.push_back({last + "hc_head_base", {hc}});
    specs.push_back({last + "hc_head_scale", {1}});
    specs.push_back({last + "norm.weight", {H}});
    specs.push_back({last + "markov_head.markov_w1.weight", {v.vocab_size, rank}});
    specs.push_back({last + "markov_head.markov_w2.weight", {v.vocab_size, rank}});
    specs.push_back({last + "confidence_head.proj.weight", {1, H + rank}});
    for (size_t i = first; i < specs.size(); ++i) specs[i].optional_part = "the DSpark draft layers";
  }
  return specs;
}

nlohmann::json v41_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source) {
  const V41TextConfig v = parse_v41_config(root, source);
  const int64_t L = v.num_hidden_layers;
  DI_INPUT_CHECK(num_layers >= 1 && num_layers <= L, "--num-layers {}: {} has {} decoder layers", num_layers, source,
                 L);
  const auto kv = [&](int64_t l) { return contains(v.kv_source_layer_ids, l); };
  const auto index = [&](int64_t l) { return contains(v.index_source_layer_ids, l); };
  const auto first = [&](auto&& wanted) {
    for (int64_t l = 0; l < L; ++l)
      if (wanted(l)) return l;
    return int64_t{-1};
  };
  const int64_t cand = v.candidate_source_layer_id;
  const std::vector<int64_t> ratio(v.compress_ratios.begin(), v.compress_ratios.begin() + L);
  std::vector<int64_t> kept;
  for (int64_t l : {cand, first([&](int64_t l) { return kv(l) && ratio[l] > 1; }),
                    first([&](int64_t l) { return cand >= 0 && l > cand && index(l) && !kv(l); }),
                    first([&](int64_t l) { return ratio[l] == 0; }),
                    first([&](int64_t l) { return ratio[l] > 1 && !kv(l) && !index(l); }),
                    first([&](int64_t l) { return ratio[l] == 1 && !kv(l) && !index(l); })})
    if (l >= 0 && !contains(kept, l)) kept.push_back(l);
  for (int64_t l = 0; l < L; ++l)
    if (!contains(kept, l)) kept.push_back(l);
  kept.resize(num_layers);
  std::sort(kept.begin(), kept.end());
  const auto renumber = [&](const std::vector<int64_t>& ids) {
    std::vector<int64_t> out;
    for (int64_t id : ids) {
      const auto it = std::find(kept.begin(), kept.end(), id);
      if (it != kept.end()) out.push_back(it - kept.begin());
    }
    return out;
  };
  nlohmann::json& t = root["text_config"];
  t["num_hidden_layers"] = num_layers;
  std::vector<int64_t> ratios;
  for (int64_t l : kept) ratios.push_back(ratio[l]);
  ratios.insert(ratios.end(), v.compress_ratios.begin() + L, v.compress_ratios.end());  // the draft layers'
  t["compress_ratios"] = ratios;
  t["kv_source_layer_ids"] = renumber(v.kv_source_layer_ids);
  t["index_source_layer_ids"] = renumber(v.index_source_layer_ids);
  const std::vector<int64_t> candidate = renumber({cand});
  t["candidate_source_layer_id"] = candidate.empty() ? -1 : candidate[0];
  if (t.contains("engram_layer_ids")) {  // the kept engram layers, with their table sizes
    std::vector<int64_t> ids, sizes;
    const auto all_sizes = t.value("engram_num_embeddings", std::vector<int64_t>{});
    for (size_t e = 0; e < v.engram_layer_ids.size(); ++e) {
      const std::vector<int64_t> id = renumber({v.engram_layer_ids[e]});
      if (id.empty()) continue;
      ids.push_back(id[0]);
      if (e < all_sizes.size()) sizes.push_back(all_sizes[e]);
    }
    t["engram_layer_ids"] = ids;
    if (t.contains("engram_num_embeddings")) t["engram_num_embeddings"] = sizes;
  }
  if (t.contains("dspark_target_layer_ids")) {
    // The drafter reads all of its target layers (its fusion is sized for them): kept whole, or dropped.
    const auto targets = t["dspark_target_layer_ids"].get<std::vector<int64_t>>();
    const std::vector<int64_t> kept = renumber(targets);
    t["dspark_target_layer_ids"] = kept.size() == targets.size() ? kept : std::vector<int64_t>{};
  }
  return root;
}

V41LayerRole v41_layer_role(const V41TextConfig& v, int64_t l) {
  V41LayerRole role;
  role.ratio = v.compress_ratios[l];
  role.kv_source = contains(v.kv_source_layer_ids, l);
  role.index_source = contains(v.index_source_layer_ids, l);
  role.owns_index_keys = role.index_source && role.kv_source;
  role.candidate_source = l == v.candidate_source_layer_id;
  role.uses_candidates = v.candidate_source_layer_id >= 0 && v.candidate_source_layer_id < l;
  const auto engram = std::find(v.engram_layer_ids.begin(), v.engram_layer_ids.end(), l);
  if (engram != v.engram_layer_ids.end()) role.engram_index = engram - v.engram_layer_ids.begin();
  return role;
}

int64_t v41_first_decoder_layer(const V41TextConfig& v) {
  for (int64_t l = 0; l < v.num_hidden_layers; ++l)
    if (v.compress_ratios[l] == 1) return l;
  return v.num_hidden_layers;
}

int64_t v41_first_compact_layer(const V41TextConfig& v) {
  int64_t first = v41_first_decoder_layer(v);
  for (int64_t l = 0; l < v.num_hidden_layers; ++l)
    if (v41_layer_role(v, l).kv_source || l == v.candidate_source_layer_id) first = std::max(first, l + 1);
  return first;
}

int64_t v41_cache_entry_dim(const V41TextConfig& v) {
  bool pooled_source = false, any_source = false;
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const V41LayerRole role = v41_layer_role(v, l);
    any_source |= role.kv_source;
    pooled_source |= role.kv_source && role.ratio > 1;
  }
  return v.head_dim * (pooled_source ? 3 : any_source ? 2 : 1);
}

ModelConfig v41_rope_config(const V41TextConfig& v, bool compress) {
  ModelConfig c;
  c.qk_rope_head_dim = v.qk_rope_head_dim;
  c.rope.theta = compress ? v.compress_rope_theta : v.rope_theta;
  if (compress && v.compress_yarn) {
    c.rope.yarn = true;
    c.rope.factor = v.yarn_factor;
    c.rope.beta_fast = v.yarn_beta_fast;
    c.rope.beta_slow = v.yarn_beta_slow;
    c.rope.original_max_position_embeddings = v.yarn_original_max_position_embeddings;
    c.rope.attention_factor = 1.0;
  }
  return c;
}

}  // namespace deepinfer
