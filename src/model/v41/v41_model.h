// DeepSeek-V4.1-Flash's text model on the CPU reference ops, as transformers' deepseek_v41 computes it (fp32):
//  - hyper-connections: hc_mult residual streams; per sublayer one projection of the normalised streams gives
//    pre (collapse weights, used by the *next* sublayer), post (placement) and comb (Sinkhorn-normalised
//    stream mixing); the last pre collapses the streams before the final norm and the LM head;
//  - attention: low-rank q, one shared K=V latent of head_dim with interleaved RoPE on its last
//    qk_rope_head_dim channels (plain RoPE on window-only layers, the compress RoPE with YaRN elsewhere), a
//    per-head sink in the softmax denominator, a sliding window of raw KV (FP8-quantised), and on layers with
//    compress_ratio > 0 the shared compressed KV of their group (FP4-quantised), of which each query sees the
//    entries its group's sparse indexer selected (two-level top-k under the candidate source's blocks);
//    grouped low-rank output projection;
//  - MoE: sqrtsoftplus scores, selection biased by `bias`, weights normalised and scaled, SwiGLU clamped at
//    swiglu_limit, one shared expert.
// Caching: the paged cache keeps, per token and layer, only what that token contributes: its window K=V and,
// on KV-source layers, its compressor inputs (projection and gate; the normalised latent at ratio 1). The
// compressed KV, the indexer keys and the partial groups are rebuilt from them at every step, so a chunked
// prefill or a decode step computes exactly what a one-shot forward over the same tokens computes.
// - engram: at its layers, before attention, each stream gains a gated value looked up by n-gram hashes of the
//   compressed token ids (engram_hash.h; kernels/cpu/engram.h).
// Engram tables in the release's FP8 layout (a UE8M0 scale per 32 values of a row) are dequantised on load; under
// an EP group of several ranks each holds a part of every table's rows and fetches the rest (row_shard.h).
// - DSpark (v41_dspark.cpp), where the checkpoint has its draft layers and its draft module is enabled: the cache
//   gains one layer per draft layer, whose window part every forward writes for each row from the features of the
//   target layers; dspark_draft runs the draft layers over blocks of [last token, noise...] (window of those keys
//   plus the block's own, non-causal within the block), the head with the Markov term, and the confidence head.
// Not built yet: the vision tower, FP8/FP4 compute (weights are dequantised to fp32 on load).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/router.h"
#include "src/model/host_causal_lm.h"
#include "src/model/deepseek/mla_kv_cache.h"
#include "src/model/rope.h"
#include "src/model/weights.h"

namespace deepinfer {

class DeepseekV41Model final : public HostCausalLm, private DraftModule {
 public:
  DeepseekV41Model(ModelConfig config, WeightStore weights);

  Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* dispatcher = nullptr) const override;
  int64_t window_state_values() const override { return config().v41.head_dim; }  // the entry's K = V

  const DraftModule* draft_module() const override { return dspark_.has_value() ? this : nullptr; }
  using CausalLm::draft_module;

  // Floats cached per token and layer: the window K=V, then the compressor inputs (KV-source layers).
  int64_t entry_dim() const { return entry_dim_; }

 private:
  struct CpuBlocks;  // the layer loop's blocks (v41_cpu_blocks.h)

  // The DSpark drafter (v41_dspark.cpp), through draft_module().
  Kind kind() const override { return Kind::kDspark; }
  void enable() override;
  bool enabled() const override { return dspark_enabled_; }
  int64_t block_size() const override { return config().v41.dspark.block_size; }
  std::vector<DraftBlock> dspark_draft(const ForwardBatch& anchors, KvCache& cache,
                                       std::span<const SamplingRow> rows) const override;
  struct Expert {
    const float* w1 = nullptr;  // gate [inter, hidden]
    const float* w2 = nullptr;  // down [hidden, inter]
    const float* w3 = nullptr;  // up [inter, hidden]
  };
  struct HyperMix {  // one sublayer's hyper-connection parameters
    const float* fn = nullptr;     // [(2 + hc) * hc, hc * hidden]
    const float* base = nullptr;   // [(2 + hc) * hc]
    const float* scale = nullptr;  // [3]
  };
  struct Layer : V41LayerRole {
    int64_t source = -1;  // the KV-source layer whose compressed KV this layer reads (ratio > 0)
    HyperMix hc_attn, hc_ffn;
    const float *attn_norm, *ffn_norm;
    const float *wq_a, *q_norm, *wq_b, *wkv, *kv_norm, *wo_a, *wo_b, *attn_sink;
    const float *compressor_wkv = nullptr, *compressor_wgate = nullptr, *compressor_norm = nullptr;
    const float *indexer_wq_b = nullptr, *indexer_weights = nullptr, *indexer_wk = nullptr, *indexer_k_norm = nullptr;
    const float *router = nullptr, *router_bias = nullptr;
    Expert shared;
    const float *engram_table = nullptr, *engram_wkv = nullptr, *engram_q = nullptr, *engram_k = nullptr;
  };
  // What the layers of one forward pass publish to the later layers, for one sequence (transformers' `shared`).
  struct SequenceState {
    std::vector<float> compressed_kv;  // [num_compressed, head_dim]: rotated, FP4-quantised, of the latest source
    int64_t num_compressed = 0;
    bool has_compressed = false;
    std::vector<float> index_keys;  // [num_index_keys, index_head_dim]: of the latest source that owns them
    int64_t num_index_keys = 0;
    bool has_index_keys = false;
    // Per new token: which compressed entries it attends (the latest index source's top-k), and the
    // candidate source's block mask; empty until published.
    std::vector<std::vector<char>> selected, candidates;
  };

  // The DSpark drafter's weights (mtp.N.*): its layers (window-only V4.1 layers), their routed experts (every rank
  // holds all of them), the fusion of the target features, and the heads on the last layer.
  struct Dspark {
    std::vector<Layer> layers;
    HostExpertStore experts;
    const float *main_proj, *main_norm;
    const float *hc_head_fn, *hc_head_base, *hc_head_scale, *norm;
    const float *markov_w1, *markov_w2, *confidence;  // W1 [vocab, rank], W2 [vocab, rank], w [1, H + rank]
  };

  Expert resolve_expert(const std::string& prefix) const;
  // A routed expert's gate, up and down tensors under `prefix` ("layers.L.ffn.experts.E." or "mtp.D..."): w1 is the
  // gate, w3 the up projection.
  static HostExpertStore::TensorNames routed_expert_tensors(const std::string& prefix) {
    return {prefix + "w1.weight", prefix + "w3.weight", prefix + "w2.weight"};
  }
  // One layer's attention and MoE weights under `prefix` ("layers.N." or "mtp.N.").
  Layer resolve_layer(const std::string& prefix, V41LayerRole role) const;
  void load_dspark();
  // q_residual [T, q_lora_rank], q [T, heads, head_dim] (rotated); kv [T, head_dim] the window K = V (rotated,
  // FP8-quantised); out [T, hidden] from the attention output attn [T, heads, head_dim] (rotated back in place).
  void project_query(const Layer& layer, const float* x, int64_t T, const int32_t* positions, bool compress,
                     float* q_residual, float* q) const;
  void project_window_kv(const Layer& layer, const float* x, int64_t T, const int32_t* positions, bool compress,
                         float* kv) const;
  void project_output(const Layer& layer, float* attn, int64_t T, const int32_t* positions, bool compress,
                      float* out) const;
  // out = shared(x) + routed(x) with `layer`'s router over `store`'s experts of MoE layer `store_layer`.
  void moe_block(const Layer& layer, const ExpertStore& store, int64_t store_layer, const cpu::RouterParams& router,
                 const float* x, float* out, int64_t T, ExpertDispatcher* dispatcher) const;
  // DSpark, inside forward(): the rows' fused target features [T, targets * hidden] to each draft layer's key,
  // written to its cache layer at the rows' positions.
  void write_draft_keys(const ForwardBatch& batch, const std::vector<int32_t>& positions, const float* features,
                        MlaKvCache& cache) const;
  // DSpark: draft layer d's attention for the block rows x [T, hidden] (the window of its cached keys before each
  // block, and the block's own keys).
  void draft_attention(int64_t d, const ForwardBatch& blocks, const std::vector<int32_t>& positions, const float* x,
                       float* out, const MlaKvCache& cache) const;
  void hyper_mixes(const HyperMix& w, const float* streams, int64_t T, float* pre, float* post, float* comb) const;
  // x [T, hidden] (attn_norm output) -> out [T, hidden]. v41_attention.cpp
  void attention(int64_t layer_idx, const ForwardBatch& batch, const std::vector<int32_t>& positions,
                 const float* x, float* out, MlaKvCache& cache, std::vector<SequenceState>& states) const;
  // The compressed KV (and indexer keys) of source layer `layer_idx` for one sequence, rebuilt from the cache.
  void publish_compressed(int64_t layer_idx, const SequenceChunk& seq, const MlaKvCache& cache,
                          SequenceState& state) const;
  // The indexer of layer `layer_idx` for one sequence's new tokens (rows [first, first + seq.num_new)).
  void run_indexer(int64_t layer_idx, const SequenceChunk& seq, int64_t first, const int32_t* positions,
                   const float* x, const float* q_residual, SequenceState& state) const;
  void moe(int64_t layer_idx, const float* x, float* out, int64_t T, ExpertDispatcher* dispatcher) const;
  // gathered [n, engram_head_dim] = the rows `rows` of engram layer e's table, from this rank's part of it or,
  // split across the EP group (config_.v41.engram_shard), from the ranks that hold them.
  void gather_engram_rows(const Layer& layer, const int64_t* rows, int64_t n, ExpertDispatcher* dispatcher,
                          float* gathered) const;
  void expert_forward(const Expert& w, const float* x, int64_t n, float* out) const;
  // RoPE on the last qk_rope_head_dim channels of rows `stride` floats apart; `rows_per_position` consecutive
  // rows (the heads of one token) share each of the `num_positions` positions. inverse: rotate back.
  void rotate(float* x, int64_t num_positions, int64_t rows_per_position, int64_t stride, const int32_t* positions,
              bool compress, bool inverse) const;

  RotaryTable main_rope_, compress_rope_;
  std::vector<Layer> layers_;
  std::optional<Dspark> dspark_;  // where the checkpoint has the draft layers
  bool dspark_enabled_ = false;
  const float *embed_, *final_norm_, *head_;
  int64_t entry_dim_ = 0;
};

}  // namespace deepinfer
