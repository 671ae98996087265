#include "src/bench/v41_floor.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/bench/roofline.h"
#include "src/model/architectures.h"
#include "src/model/v41/v41_config.h"

namespace deepinfer {

namespace {

// The projections a V4.1 FP8 checkpoint stores as FP8 blocks (as the CUDA model reads them: cuda_v41_model.cpp).
bool stored_fp8(const ModelConfig& c, const std::string& name) {
  if (!c.quantization.fp8) return false;
  for (const char* suffix : {"attn.wq_a.weight", "attn.wkv.weight", "attn.wq_b.weight", "attn.wo_b.weight",
                             "shared_experts.w1.weight", "shared_experts.w2.weight", "shared_experts.w3.weight"})
    if (name.ends_with(suffix)) return true;
  return name.ends_with("attn.wo_a.weight") && c.v41.o_lora_rank % 32 == 0;
}

double numel(const Shape& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

// Per stored value: FP8 codes + a ue8m0 byte per 32 x 32 block; bf16 otherwise (norms, mixes, router, indexer and
// compressor projections, the head); the few fp32 vectors (sinks, router bias, mixes' bases) counted as bf16.
double bytes_per_value(const ModelConfig& c, const std::string& name) {
  return stored_fp8(c, name) ? 1.0 + 1.0 / 1024 : 2.0;
}

bool is_table_or_expert(const std::string& name) {
  return name.find("ffn.experts.") != std::string::npos || name.ends_with("engram.embed.weight");
}

// One layer's weights: bytes read once, FLOPs per token at each rate (every matrix is applied once per token).
struct LayerWeights {
  double bytes = 0, fp8_flops_per_token = 0, bf16_flops_per_token = 0;
};

// Every decoder layer's, from the tensor list in one pass (names "layers.N.…").
std::vector<LayerWeights> layer_weights(const ModelConfig& c) {
  std::vector<LayerWeights> layers(c.v41.num_hidden_layers);
  for (const TensorSpec& spec : v41_tensor_specs(c)) {
    if (!spec.name.starts_with("layers.") || is_table_or_expert(spec.name)) continue;
    const int64_t layer = std::stoll(spec.name.substr(7));
    LayerWeights& w = layers.at(layer);
    const double n = numel(spec.shape);
    w.bytes += n * bytes_per_value(c, spec.name);
    if (spec.shape.size() != 2) continue;
    (stored_fp8(c, spec.name) ? w.fp8_flops_per_token : w.bf16_flops_per_token) += 2.0 * n;
  }
  return layers;
}

// What the attention of one query at position `pos` (0-based) of layer `role` reads and computes.
struct QueryAttention {
  double window = 0, picks = 0, scanned_keys = 0;
};

// `floor`: no window key below it (bounded replay's decoder layers).
QueryAttention query_attention(const V41TextConfig& v, const V41LayerRole& role, int64_t pos, int64_t floor) {
  QueryAttention q;
  q.window = static_cast<double>(std::max<int64_t>(0, std::min({pos + 1, v.sliding_window, pos + 1 - floor})));
  if (role.ratio > 0) {
    const int64_t entries = (pos + 1) / role.ratio;
    q.picks = static_cast<double>(std::min(entries, v.index_topk));
    if (role.index_source) {
      const int64_t candidates = v.candidate_topk_blocks * v.candidate_block_size;
      q.scanned_keys = static_cast<double>(role.uses_candidates ? std::min(entries, candidates) : entries);
    }
  }
  return q;
}

struct CacheFormat {
  double window_bytes, entry_bytes, key_bytes;  // per cached value read
};

CacheFormat cache_format(const V41TextConfig& v) {
  const double hd = static_cast<double>(v.head_dim), ihd = static_cast<double>(v.index_head_dim);
  return {hd + hd / 32, hd / 2 + hd / 16, ihd / 2 + ihd / 32};
}

// Adds `queries` rows' attention at `pos`: bytes of the cache they read, FLOPs.
void add_attention(const V41TextConfig& v, const V41LayerRole& role, int64_t pos, double queries, bool count_reads,
                   StepWork& work, int64_t floor = 0) {
  const QueryAttention q = query_attention(v, role, pos, floor);
  const CacheFormat f = cache_format(v);
  const double heads = static_cast<double>(v.num_attention_heads), hd = static_cast<double>(v.head_dim);
  work.bf16_flops += queries * heads * 4.0 * hd * (q.window + q.picks);
  work.fp8_flops += queries * 2.0 * v.index_n_heads * v.index_head_dim * q.scanned_keys;
  if (count_reads) work.bytes += queries * (q.window * f.window_bytes + q.picks * f.entry_bytes + q.scanned_keys * f.key_bytes);
}

// What every step pays whatever its attention: weights, experts, engram rows, embedding rows, the head. Layer l
// computes `tokens` rows, or `kept` from layer `kept_from` on (bounded replay's compact form).
void add_weights(const ModelConfig& c, double tokens, double head_rows, const ExpertWork& experts, StepWork& work,
                 int64_t kept_from = -1, double kept = 0) {
  const V41TextConfig& v = c.v41;
  const double H = static_cast<double>(v.hidden_size), I = static_cast<double>(v.moe_intermediate_size);
  const std::vector<LayerWeights> layers = layer_weights(c);
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const LayerWeights& w = layers[l];
    const double rows = kept_from >= 0 && l >= kept_from ? kept : tokens;
    work.bytes += w.bytes;
    work.fp8_flops += rows * w.fp8_flops_per_token;
    work.bf16_flops += rows * w.bf16_flops_per_token;
    work.bytes += experts.experts_touched * v41_expert_bytes(c);
    work.fp8_flops += experts.pairs * 2.0 * 3.0 * I * H;
    if (v41_layer_role(v, l).engram_index >= 0)
      work.bytes += rows * static_cast<double>(v41_engram_columns(v)) * v.engram_head_dim *
                    (c.quantization.fp8 ? 1.0 + 1.0 / 32 : 2.0);
  }
  work.bytes += tokens * H * 2.0;                              // embedding rows
  work.bytes += static_cast<double>(v.vocab_size) * H * 2.0 + 2.0 * H;  // head + final norm
  work.bf16_flops += head_rows * 2.0 * v.vocab_size * H;
}

}  // namespace

double v41_layer_weight_bytes(const ModelConfig& c, int64_t layer) { return layer_weights(c).at(layer).bytes; }

RankWeightBytes v41_rank_weight_bytes(const ModelConfig& c, int64_t expert_slots, double engram_share, bool with_drafts) {
  RankWeightBytes r;
  const double expert_value_bytes = v41_expert_bytes(c) / (3.0 * static_cast<double>(c.v41.moe_intermediate_size) *
                                                          static_cast<double>(c.v41.hidden_size));
  for (const TensorSpec& spec : v41_tensor_specs(c)) {
    if (!spec.optional_part.empty() && !with_drafts) continue;
    const double n = numel(spec.shape);
    if (spec.name.find("ffn.experts.") != std::string::npos) {
      if (spec.name.starts_with("mtp.")) r.experts += n * expert_value_bytes;  // the draft layers' own, held whole
    } else if (spec.name.ends_with("engram.embed.weight"))
      r.non_expert += engram_share * n * (c.quantization.fp8 ? 1.0 + 1.0 / 32 : 2.0);
    else
      r.non_expert += n * bytes_per_value(c, spec.name);
  }
  r.experts += static_cast<double>(c.v41.num_hidden_layers) * static_cast<double>(expert_slots) * v41_expert_bytes(c);
  return r;
}

double v41_expert_bytes(const ModelConfig& c) {
  const double values = 3.0 * static_cast<double>(c.v41.moe_intermediate_size) * c.v41.hidden_size;
  if (c.quantization.fp4_experts) return values * (0.5 + 1.0 / 32);
  return values * (c.quantization.fp8 ? 1.0 + 1.0 / 1024 : 2.0);
}

StepWork v41_decode_work(const ModelConfig& c, int64_t batch, int64_t context, const ExpertWork& experts) {
  StepWork work;
  add_weights(c, static_cast<double>(batch), static_cast<double>(batch), experts, work);
  for (int64_t l = 0; l < c.v41.num_hidden_layers; ++l)
    add_attention(c.v41, v41_layer_role(c.v41, l), context, static_cast<double>(batch), /*count_reads=*/true, work);
  return work;
}

StepWork v41_prefill_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ExpertWork& experts,
                          int64_t compact_keep_tokens) {
  StepWork work;
  const V41TextConfig& v = c.v41;
  const double tokens = static_cast<double>(prompts) * prompt_len;
  const bool compact = compact_keep_tokens > 0;
  const int64_t kept_from = compact ? v41_first_compact_layer(v) : -1;
  // The decoder layers' floor (mask and compact alike) and the rows the compact form keeps (at least the last).
  const int64_t floor = compact ? std::max<int64_t>(0, prompt_len - compact_keep_tokens) : 0;
  const int64_t first_kept = std::min(floor, prompt_len - 1);
  add_weights(c, tokens, static_cast<double>(prompts), experts, work, kept_from,
              static_cast<double>(prompts) * static_cast<double>(prompt_len - first_kept));
  // A prefill's attention reads its tiles from on-chip memory: FLOPs only (the cache's writes are one pass).
  const int64_t first_decoder = v41_first_decoder_layer(v);
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const V41LayerRole role = v41_layer_role(v, l);
    const int64_t from = compact && l >= kept_from ? first_kept : 0;
    for (int64_t pos = from; pos < prompt_len; ++pos)
      add_attention(v, role, pos, static_cast<double>(prompts), /*count_reads=*/false, work,
                    l >= first_decoder ? floor : 0);
  }
  return work;
}

}  // namespace deepinfer
