// The DeepSeek-V4.1-Flash text configuration (model_type deepseek_v41: text_config nested under the root, with
// quantization_config at the root), read and checked as transformers' DeepseekV41TextConfig does; names follow
// it. The architecture registry's deepseek_v41 entry (parse_deepseek_v41, v41_tensor_specs) is built on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/row_shard.h"

namespace deepinfer {

struct V41Quantization {
  std::string method;              // "fp8" or "" (bf16 checkpoint)
  int64_t block_rows = 0, block_cols = 0;  // weight_block_size of the FP8 scales
  std::string scale_format;        // "ue8m0"
  std::string expert_dtype;        // "fp4" or "fp8"
};

// The engram hashing's tables (engram_hash.h reads or generates them): token id -> compressed id, and per
// engram layer the multipliers [max_ngram], primes [(max_ngram - 1) * n_heads] and the row offset of each
// (order, head) bucket range in the layer's table.
struct EngramHashTables {
  std::vector<int32_t> compressed_ids;
  std::vector<int64_t> multipliers, primes, offsets;
};

struct V41TextConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0, num_nextn_predict_layers = 0;
  // Attention: q low-rank, one shared K=V latent of head_dim (RoPE on its last qk_rope_head_dim channels),
  // grouped low-rank output projection.
  int64_t num_attention_heads = 0, head_dim = 0, qk_rope_head_dim = 0, q_lora_rank = 0, o_lora_rank = 0,
          o_groups = 0;
  int64_t sliding_window = 0;
  // Per layer, the draft layers' included (num_hidden_layers + num_nextn_predict_layers entries; those are 0):
  // 0 window only, 1 full-resolution shared KV (the decoder), r > 1 groups of r tokens pooled (the encoder).
  std::vector<int64_t> compress_ratios;
  std::vector<int64_t> kv_source_layer_ids, index_source_layer_ids;
  int64_t candidate_source_layer_id = -1;  // -1: no two-level top-k
  int64_t candidate_topk_blocks = 0, candidate_block_size = 0;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  // Hyper-connections.
  int64_t hc_mult = 1, hc_sinkhorn_iters = 0;
  double hc_eps = 0.0;
  // MoE.
  int64_t n_routed_experts = 0, n_shared_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  std::string scoring_func, topk_method;
  bool norm_topk_prob = false;
  double gate_temp = 1.0, routed_scaling_factor = 1.0, swiglu_limit = 0.0;
  double rms_norm_eps = 0.0, rope_theta = 0.0, compress_rope_theta = 0.0;
  // rope_scaling: YaRN on the compressed branches' RoPE only, without its attention factor (as transformers).
  bool compress_yarn = false;
  double yarn_factor = 1.0, yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
  int64_t yarn_original_max_position_embeddings = 0;
  int64_t max_position_embeddings = 0;
  // Engram (conditional memory): at these layers, before attention, every stream gains a gated value looked up
  // by hashing the 2..engram_max_ngram_size-grams of compressed token ids ending at each token into
  // engram_n_heads prime-sized buckets per order (tables of engram_num_embeddings rows of engram_head_dim).
  std::vector<int64_t> engram_layer_ids, engram_num_embeddings;
  int64_t engram_vocab_size = 0, engram_max_ngram_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int64_t engram_pad_id = 0, engram_compressed_vocab_size = 0;
  EngramHashTables engram_hash;  // filled by the model loader (engram_hash.h) where engram layers run
  // Where the CUDA backend keeps the engram tables (a loader choice, --engram-tables; not the checkpoint's): GPU
  // memory, or pinned host memory that each step gathers its rows from.
  bool engram_tables_on_host = false;
  // This rank's part of every engram table (a loader choice: the EP group's ranks split the tables by rows and
  // fetch each step's rows from their owners; whole on one rank).
  RowShard engram_shard;
  std::vector<int64_t> eos_token_ids;
  V41Quantization quantization;
  // DSpark, the drafter of speculative decoding (the checkpoint's num_nextn_predict_layers draft layers, mtp.N.*):
  // the main model's hidden states entering attention at dspark_target_layer_ids, averaged over the streams, are
  // fused into one feature per token, from which every draft layer keeps a window key; a step drafts a block of
  // dspark_block_size tokens per request from [last token, noise x (block - 1)] (engine/dspark_drafter.h).
  struct Dspark {
    int64_t block_size = 0;  // 0: the checkpoint's config has no DSpark drafter
    int64_t noise_token_id = 0, markov_rank = 0, n_routed_experts = 0, num_experts_per_tok = 0;
    std::vector<int64_t> target_layer_ids;
    std::string unusable;  // where the config has DSpark keys that do not fit it: why (block_size is then 0)
    bool enabled() const { return block_size > 0; }
  } dspark;
};

// Absent schedules get transformers' defaults; throws InputError naming the file and key for a missing,
// mistyped or inconsistent entry (the same checks as DeepseekV41TextConfig, stated in our words).
V41TextConfig parse_v41_config(const nlohmann::json& root, const std::string& source);

struct ModelConfig;
class ConfigReader;
struct TensorSpec;
// The registry's entries: the engine-wide fields of ModelConfig from the text config (plus config.v41), and the
// checkpoint's tensors under their own bare names (embed, layers.N.attn.*, layers.N.ffn.experts.E.w1, head).
void parse_deepseek_v41(const ConfigReader& root, ModelConfig& config);
std::vector<TensorSpec> v41_tensor_specs(const ModelConfig& config);
// The configuration `root` (a deepseek_v41 config.json) at `num_layers` of its layers, for runs of the public
// width on one GPU: the layers that carry a mechanism are kept first — the candidate source, the first pooled KV
// source, the first index source after the candidate source that reads another layer's keys, a window-only
// layer, a pooled layer that is no source, a ratio-1 layer that is no source — then the others in order, until
// num_layers; the kept layers keep their order and are renumbered, and every per-layer list (compress ratios, KV,
// index and engram layers, DSpark targets) follows. The result parses as any config.json (the same checks).
nlohmann::json v41_at_depth(nlohmann::json root, int64_t num_layers, const std::string& source);

// What a layer is in V4.1's schedule (both backends' layers derive from it).
struct V41LayerRole {
  int64_t ratio = 0;  // compress_ratio: 0 window only, 1 per-token compressed KV, r > 1 pooled groups
  bool kv_source = false;         // publishes the compressed KV its group reads
  bool index_source = false;      // runs an indexer (its own keys where it is a KV source too)
  bool owns_index_keys = false;
  bool candidate_source = false;  // its indexer also picks the candidate blocks
  bool uses_candidates = false;   // a later layer: its indexer's scores are masked to the candidates
  int64_t engram_index = -1;      // its place in engram_layer_ids (its table, its columns of the hash), -1 none
};
V41LayerRole v41_layer_role(const V41TextConfig& v, int64_t layer);
// The first layer of compress ratio 1 (DeepInfer's n_prefill_layer; 20 of 40 in the release): it and the layers
// after it are the decoder side, whose windows bounded replay narrows. num_hidden_layers where there is none.
int64_t v41_first_decoder_layer(const V41TextConfig& v);
// Where bounded replay's compact form starts dropping prefill rows: the first decoder layer past every layer whose
// per-token results later tokens read beyond the window (the KV sources' compressed entries, the candidate
// source's blocks), so the kept rows get exactly what the mask form gives them (release: layer 21 of 40).
int64_t v41_first_compact_layer(const V41TextConfig& v);
// Bounded replay keeps at least the window and the speculative backtracking margin (DeepInfer asserts 128 + 6).
inline constexpr int64_t kV41BacktrackingTokens = 6;
// The table rows an engram layer reads per token: one per (n-gram order 2..max, head).
inline int64_t v41_engram_columns(const V41TextConfig& v) { return (v.engram_max_ngram_size - 1) * v.engram_n_heads; }
// Values cached per token and layer (the widest layer's entry, the same for every layer, so that a cache moves
// between backends unchanged): the window K = V, then a KV source's compressor kv (and gate, pooled sources).
int64_t v41_cache_entry_dim(const V41TextConfig& v);

// The two RoPE tables of V4.1, as the configuration a RotaryTable is built from: `main` (plain, rope_theta; the
// window-only layers) and `compress` (compress_rope_theta, YaRN from rope_scaling without its attention factor;
// the layers with a compress ratio, their compressed entries and indexer).
ModelConfig v41_rope_config(const V41TextConfig& v, bool compress);

}  // namespace deepinfer
