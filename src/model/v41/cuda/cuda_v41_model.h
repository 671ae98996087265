// DeepSeek-V4.1 on one GPU: the layer loop of v41_layers.h over CUDA blocks, the same function as the CPU
// reference (DeepseekV41Model, checked against it) with bf16 weights and activations, fp32 residual streams
// (hyper-connections) and fp32 accumulation.
//  - Attention: one projection of h for the query's low rank, K=V and (on KV sources) the compressor inputs
//    (their weights stacked), K=V RMS-normalised and rotated, then written to the paged cache as FP8 bytes (e4m3
//    codes, a ue8m0 scale per 32: cuda_v41_kv_cache.h), KV sources' compressor inputs beside it (bf16). KV
//    sources pool the groups a step completes (gated pooling, norm, RoPE, FP4) with their indexer keys into the
//    cache's group slots, and publish every complete group's entry (read from there) for the later layers, as the
//    CPU model publishes the ones it rebuilds each step; index sources score them (FP4 queries,
//    relu-weighted), mask by the candidate source's blocks and keep the top-k; every query then attends its
//    window plus its picks with the head's sink (sparse_window_attention, one kernel for prefill and decode),
//    the output rotated back and projected through the grouped low rank.
//  - MoE: CudaMoe (shared with V2/V3): sqrt-softplus routing with the selection bias, the SwiGLU clamped.
// The compressed entries, index keys, selections and candidate masks of a step live in its `published_`
// pool, what one sublayer needs only in `scratch_` (rewound at every sublayer).
// Weights as the checkpoint stores them: FP8 attention projections (wq_a, wkv, wq_b, wo_b, and wo_a where its
// groups' rows are whole 32-row scale blocks) and shared experts where the checkpoint holds them as FP8, and FP4
// routed experts where its quantization_config says so (quantised on the device from the loaded values, which they
// reproduce exactly), the rest bf16 (fp32: the hyper-connections' bases and scales, the sinks, the routers' bias).
// Engram: the step's table rows hashed on the host (engram_hash.h) and uploaded with the plan; rows gathered
// from the tables (FP8 with a scale per 32 values where the checkpoint is FP8, else bf16; in GPU memory or, with
// --engram-tables host, pinned host memory read over PCIe),
// projected by wkv and gated into the streams (engram_mix).
// Decode steps (one new token a sequence) lay the compressed entries out in fixed shapes (StepPlan::Groups) and
// replay CUDA graphs (decode_graphs.h).
// Not built yet: the published entries are still copied per step (O(context) bytes, no
// arithmetic) rather than read in place through the block tables.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/core/device_array.h"
#include "src/model/cuda/cuda_causal_lm.h"
#include "src/model/v41/cuda/cuda_v41_kv_cache.h"
#include "src/model/v41/v41_layers.h"

namespace deepinfer {

class CudaV41Model final : public CudaCausalLm, private DraftModule {
 public:
  // Fills the weights on `device` (which becomes the current device) from `weights`.
  CudaV41Model(ModelConfig config, const DeviceWeightSource& weights, int device);

  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override;
  // Engram tables whole on this rank: the rows are hashed on the device, after the inputs the device writes. Split
  // across an EP group (--engram-split group, more than one rank), they are hashed on the host to be fetched, so a
  // step cannot start before its inputs reach the host.
  bool samples_async() const override {
    return config_.v41.engram_layer_ids.empty() || config_.v41.engram_shard.whole();
  }
  size_t kv_cache_bytes_per_token() const override {
    return CudaV41KvCache::bytes_per_token(config_.v41.head_dim, cache_specs_);
  }
  // DeepSeek-V4.1's DSpark drafter (the CPU model's, v41_dspark.cpp; here cuda_v41_dspark.cpp), loaded where a
  // checkpoint carries its mtp.* layers. Once enabled the cache holds one window-only layer per draft layer, and
  // every step also averages the streams entering attention at the target layers (hc_collapse's mean), fuses them
  // (main_proj, main_norm) and writes each draft layer's window key of every row (FP8, as the main layers' window),
  // inside the step (graphed decode steps replay it). dspark_draft runs the draft layers over the blocks, then per
  // slot the head plus the Markov term, the draw on the device and the confidence head.
  const DraftModule* draft_module() const override { return dspark_ != nullptr ? this : nullptr; }
  using CausalLm::draft_module;

 private:
  Kind kind() const override { return Kind::kDspark; }
  void enable() override;
  bool enabled() const override { return dspark_enabled_; }
  int64_t block_size() const override { return config_.v41.dspark.block_size; }
  std::vector<DraftBlock> dspark_draft(const ForwardBatch& anchors, KvCache& cache,
                                       std::span<const SamplingRow> rows) const override;
  // Chained drafts (DraftModule::start_chained_draft): a started verify step's acceptance is found by a kernel behind its
  // sampling, and the draft's rows are moved to the positions it reaches there (speculation.cuh).
  bool chains_drafts() const override { return dspark_enabled_; }
  void start_chained_draft(const ForwardBatch& verify, KvCache& cache, std::span<const SamplingRow> rows) const override;
  std::vector<DraftBlock> finish_chained_draft() const override;

  struct HyperMix {  // one sublayer's hyper-connection parameters
    const Bf16* fn = nullptr;      // [(2 + hc) * hc, hc * hidden]
    const float* base = nullptr;   // [(2 + hc) * hc]
    const float* scale = nullptr;  // [3]
  };
  // A Linear's weight as the checkpoint stores it (cuda_mlp.h): FP8 ones quantised on the device when loaded, from
  // values they reproduce exactly.
  using Projection = DeviceLinear;
  struct Layer : V41LayerRole {
    HyperMix hc_attn, hc_ffn;
    const Bf16 *attn_norm = nullptr, *ffn_norm = nullptr;
    Projection q_kv;        // [q_lora_rank + head_dim, hidden]: wq_a, then wkv (FP8 where the checkpoint is)
    Projection compressor;  // on a KV source [head_dim (x 2 at ratio > 1), hidden]: compressor.wkv (, .wgate), bf16
    Projection wq_b, wo_a, wo_b;
    const Bf16 *q_norm = nullptr, *kv_norm = nullptr;
    const float* attn_sink = nullptr;
    const Bf16* compressor_norm = nullptr;
    const Bf16 *indexer_wq_b = nullptr, *indexer_weights = nullptr, *indexer_wk = nullptr, *indexer_k_norm = nullptr;
    CudaMoeWeights moe;
    // The table in GPU or mapped host memory: bf16 rows, or (FP8 checkpoints) e4m3 codes with a ue8m0 scale per
    // 32 values of a row, as the checkpoint stores it.
    const Bf16* engram_table = nullptr;
    const uint8_t *engram_codes = nullptr, *engram_scales = nullptr;
    const Bf16* engram_wkv = nullptr;
    const float *engram_q = nullptr, *engram_k = nullptr;
  };
  // Steps of at least this many rows (prefill; never a fixed-shape decode step) score the indexer's keys with
  // cuBLAS products, at most this many bytes of them at a time.
  static constexpr int64_t kIndexerProductRows = 16;
  static constexpr int64_t kIndexerProductBytes = int64_t{256} << 20;
  struct StepPlan;   // the step's index arrays, uploaded once (cuda_v41_model.cpp)
  // The step's engram rows (`rows`, as hashed) from the EP group's ranks that hold them, when the tables are split
  // (v.engram_shard): each row's bytes in order, FP8 codes then scales, or bf16 values.
  static std::vector<uint8_t> fetch_engram_rows(const std::vector<int64_t>& rows, const V41TextConfig& v,
                                                const std::vector<Layer>& layers, ExpertDispatcher* experts,
                                                ScratchPool& pool);
  struct StepState;  // what the step's layers publish to the later ones (cuda_v41_model.cpp)
  struct CudaBlocks;  // the layer loop's blocks (cuda_v41_blocks.h)

  // A layer's weights under `prefix` ("layers.N." or a draft layer's "mtp.N."), its routed experts into `experts`
  // as layer `expert_layer` (the engram table is the caller's).
  Layer upload_layer(const DeviceWeightSource& weights, const std::string& prefix, const V41LayerRole& role,
                     CudaExpertStore& experts, int64_t expert_layer, int64_t num_experts);
  // The named weights stacked by rows into one Projection, FP8 with `fp8`.
  Projection upload_projection(const DeviceWeightSource& weights, const std::vector<std::string>& names, bool fp8);
  // Whether every named weight is FP8 in the checkpoint (with dummy weights: whether the quantization_config says
  // FP8), and so is held as FP8 on the device.
  bool stored_fp8(const DeviceWeightSource& weights, const std::vector<std::string>& names) const;
  // Fills rows [row, row + rows of `name`) of a stacked [*, cols] weight.
  void fill_rows(const DeviceWeightSource& weights, const std::string& name, Bf16* stacked, int64_t row) const;

  float* run_to_logits(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                       int64_t* rows) const override;
  ScratchPool& step_pool() const override { return published_; }
  // out = attention(h) of layer `l`, appending the new tokens' entries to `cache_layer` (cuda_v41_attention.cpp).
  void attention(int64_t l, const StepPlan& plan, StepState& state, const CudaV41KvCache::Layer& cache_layer,
                 const Bf16* h, Bf16* out) const;
  // One hyper-connection site on the streams [T, hc, hidden]: the site's mixes (post, comb, and the next site's
  // collapse weights into next_pre, then swapped into pre), and h = rms_norm(the streams collapsed by pre) * norm.
  // With `out` non-null the previous sublayer's hc_post (out, post, comb) runs first, in the same launch where the
  // site is one launch (fuses_hc_sites(T)).
  void hyper_site(const HyperMix& mix, const Bf16* norm, int64_t T, float* streams, float*& pre, float*& next_pre,
                  float* post, float* comb, Bf16* h, const Bf16* out = nullptr) const;
  // One launch a site up to kHcSiteMaxTokens tokens (decode and verify steps); above, the chain, whose GEMM reads fn
  // once where cuda::hc_site reads it again for every token: at V4.1-Flash's width the launch took 98.6 us a site
  // against the chain's 121.4 at 256 tokens and 1,213 against 913 at 4,096 (results/h200/v41/README.md, "One
  // launch a hyper-connection site").
  // Under --batch-invariant every step takes the one launch: the two forms differ in bits, so choosing by the step's
  // size would make a token's bits depend on what it was batched with.
  static constexpr int64_t kHcSiteMaxTokens = 256;
  bool fuses_hc_sites(int64_t T) const {
    return hc_site_fused_ && (T <= kHcSiteMaxTokens || config_.batch_invariant);
  }
  // A layer's queries and window K=V from h [T, hidden] (in scratch): the query's low-rank residual [T, q_lora] (the
  // indexer reads it), the rotated queries [T, heads * head_dim], and K=V normalised and rotated, rows of q_lora_rank +
  // head_dim apart.
  struct QueryAndKv {
    Bf16 *q_residual, *q, *kv;
  };
  QueryAndKv project_query_and_kv(const Layer& layer, const Bf16* h, int64_t T, const int32_t* positions,
                                  bool compress) const;
  // The attention output [T, heads * head_dim] (rotated back in place) through the grouped low-rank projection.
  void project_output(const Layer& layer, Bf16* attn, int64_t T, const int32_t* inverse_positions, bool compress,
                      Bf16* out) const;
  // DSpark (cuda_v41_dspark.cpp): the weights where the checkpoint has them; inside a step, the rows' target
  // features [T, targets * hidden] to each draft layer's window key in the cache at the plan's slots.
  void load_dspark(const DeviceWeightSource& weights);
  void write_draft_keys(const StepPlan& plan, const Bf16* features, CudaV41KvCache& cache) const;
  struct DraftPlan;  // the blocks' index arrays (cuda_v41_dspark.cpp)
  // A draft's blocks: per sequence its anchor's position p (with `accepted`, before adding its count) and block table,
  // the anchors' tokens on the device, and (chained drafts) each sequence's accepted drafts on the device.
  struct DraftAnchors {
    std::vector<int64_t> positions;
    std::vector<std::span<const int32_t>> block_tables;
    const int32_t* tokens = nullptr;    // [S]
    const int32_t* accepted = nullptr;  // [S], or null
  };
  // Where a draft's results go on the device: tokens and the confidence score's two parts, slot k of block s at
  // k * S + s.
  struct DraftOutputs {
    int32_t* drawn;
    float *score_hidden, *score_markov;
  };
  // Queues the draft of `anchors` (`rows` one per block) into `out`; nothing waits.
  void queue_draft(const DraftAnchors& anchors, std::span<const SamplingRow> rows, CudaV41KvCache& cache,
                   const DraftOutputs& out) const;
  // The host's blocks from a draft's results copied back.
  std::vector<DraftBlock> draft_blocks(const std::vector<int64_t>& positions, const int32_t* drawn,
                                       const float* score_hidden, const float* score_markov) const;
  CudaV41KvCache& draft_cache(KvCache& cache) const;
  // Draft layer d's attention for the block rows h: each row the window of the layer's cached keys before its block,
  // and its block's own keys.
  void draft_attention(int64_t d, const DraftPlan& plan, const CudaV41KvCache& cache, const Bf16* h, Bf16* out) const;
  int64_t num_cache_layers() const { return static_cast<int64_t>(cache_specs_.size()); }
  // A KV source's compressed entries (and indexer keys, where it owns them) for every sequence, into `state`.
  void publish_compressed(int64_t l, const StepPlan& plan, StepState& state,
                          const CudaV41KvCache::Layer& cache_layer) const;
  // An index source's picks for every new token whose sequence has indexer keys, into `state`.
  void run_indexer(int64_t l, const StepPlan& plan, StepState& state, const Bf16* h, const Bf16* q_residual) const;
  using CudaCausalLm::linear;
  // y = x . w^T for a Projection (device_linear: FP8 read as stored up to decode sizes, dequantised into scratch above).
  void linear(const Bf16* x, const Projection& w, void* y, bool y_fp32, int64_t m) const;
  // RoPE in place on the last qk_rope_head_dim of rows `stride` apart, `per_position` rows a position, with the
  // main or the compress table.
  void rotate(Bf16* x, int64_t rows, int64_t stride, const int32_t* positions, int64_t per_position,
              bool compress) const;

  int64_t entry_dim_ = 0;  // the CPU model's cache entry: what transfers carry per token and layer
  std::vector<CudaV41KvCache::LayerSpec> cache_specs_;  // per layer, what its cache holds beyond the window
  std::vector<Layer> layers_;
  std::vector<MappedHostArray> engram_host_tables_;  // --engram-tables host: the tables, pinned and mapped
  struct DeviceEngramHash {  // the hash's tables (engram_hash.h) on the device, when it hashes there
    DeviceArray<int32_t> compressed_ids;
    DeviceArray<int64_t> multipliers, primes, offsets;
    int64_t pad_compressed_id = 0;
  };
  std::unique_ptr<DeviceEngramHash> engram_hash_;  // null: no engram layers, or the tables split (hashed on the host)
  size_t engram_table_bytes_ = 0;
  const Bf16 *embed_ = nullptr, *final_norm_ = nullptr, *head_ = nullptr;
  DeviceArray<float> main_inv_freq_, compress_inv_freq_;
  // The step's plan and what its layers publish (reset per step); scratch_ holds one sublayer's temporaries (rewound
  // at every sublayer).
  mutable ScratchPool published_;
  // A site in one launch (cuda::hc_site), the hc_post before it included; DEEPINFER_HC_SITE_CHAIN=1 keeps the chain
  // of five kernels and the separate hc_post (the A side of results/h200/v41's hyper-connection measurements).
  bool hc_site_fused_ = true;
  struct Dspark {
    ModelConfig moe_config;  // the model's with the draft layers' expert counts (what their CudaMoe routes by)
    std::vector<Layer> layers;
    std::unique_ptr<CudaExpertStore> experts;
    std::unique_ptr<CudaMoe> moe;
    const Bf16 *main_proj = nullptr, *main_norm = nullptr, *hc_head_fn = nullptr, *norm = nullptr;
    const Bf16 *markov_w1 = nullptr, *markov_w2 = nullptr, *confidence = nullptr;
    const float *hc_head_base = nullptr, *hc_head_scale = nullptr;
  };
  std::unique_ptr<Dspark> dspark_;  // null: the checkpoint has no draft layers
  bool dspark_enabled_ = false;
};

}  // namespace deepinfer
