// The DeepSeek V2/V3 forward pass on one GPU: bf16 weights and activations, fp32 accumulation, the kernels of
// kernels/cuda and cuBLAS. Same function as the CPU reference (DeepseekModel), checked against it.
// Prefill chunks use the expanded attention, decode steps the absorbed form on the paged latent cache. The MoE
// layers are CudaMoe's (cuda_moe.h, shared with the V4.1 model). Decode steps replay CUDA graphs (run_to_logits).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "src/core/device_array.h"
#include "src/model/cuda/cuda_causal_lm.h"
#include "src/model/deepseek/deepseek_layers.h"

namespace deepinfer {

class CudaDeepseekModel final : public CudaCausalLm, private DraftModule {
 public:
  // Fills the weights on `device` (which becomes the current device) from `weights`.
  CudaDeepseekModel(ModelConfig config, const DeviceWeightSource& weights, int device);

  std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const override;
  size_t kv_cache_bytes_per_token() const override { return num_cache_layers() * config_.kv_entry_dim() * 2; }
  // DeepSeek-V3's MTP module (the CPU model's, deepseek_model.h), loaded where a checkpoint carries it: once
  // enabled, every step keeps its rows' final-normed hidden states in its scratch (a device copy; graphed steps
  // replay it), and the module runs eagerly in a pool of its own, so they survive until the next step.
  const DraftModule* draft_module() const override { return mtp_ != nullptr ? this : nullptr; }
  using CausalLm::draft_module;

 private:
  Kind kind() const override { return Kind::kMtp; }
  void enable() override;
  bool enabled() const override { return mtp_enabled_; }
  int64_t block_size() const override { return 1; }
  Tensor mtp_forward(const ForwardBatch& batch, std::span<const int64_t> hidden_rows, KvCache& cache) const override;
  std::vector<MtpDraft> mtp_draft(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                  KvCache& cache) const override;
  // Chained MTP drafts (DraftModule::start_chained_draft): the module over every row of the verify step, its tokens
  // and the row it is read at set on the device from the step's acceptance (cuda::chain_mtp_inputs).
  bool chains_drafts() const override { return mtp_enabled_; }
  void start_chained_draft(const ForwardBatch& verify, KvCache& cache, std::span<const SamplingRow> rows) const override;
  std::vector<DraftBlock> finish_chained_draft() const override;

  using Mlp = DeviceMlp;
  // The projections are bf16, or FP8 as an FP8 checkpoint stores them (fp8_block_), but kv_b: the absorbed decode
  // reads each head's W_uk and W_uv in place as bf16.
  struct Attention {
    // The query's first projection (q_a_proj, or q_proj without q_lora) and kv_a_proj_with_mqa stacked by rows: a
    // decode step runs them as one product.
    DeviceLinear first_and_kv_a;
    const Bf16* q_a_norm = nullptr;
    DeviceLinear q_b;
    const Bf16* kv_a_norm = nullptr;
    const Bf16* kv_b = nullptr;
    // --batch-invariant only: each head's W_uk (its first qk_nope rows of kv_b, [nope, lora]) stored transposed,
    // [heads, lora, nope], so the skinny kernel runs W_uk's product in launches of 64 rows at every row count.
    const Bf16* w_uk_t = nullptr;
    DeviceLinear o;
  };
  using Layer = DeepseekLayerWeights<Bf16, Attention, Mlp, CudaMoeWeights>;
  struct Mtp {  // the module's weights (model.layers.<num_hidden_layers>.*) and its routed experts, held whole
    Layer layer;
    const Bf16 *enorm = nullptr, *hnorm = nullptr, *head_norm = nullptr, *head = nullptr;
    DeviceLinear eh_proj;
    std::unique_ptr<CudaExpertStore> experts;
    std::unique_ptr<CudaMoe> moe;
  };
  struct StepPlan;  // host-side indices of one forward step, uploaded once (cuda_deepseek_step.h)
  struct CudaBlocks;  // the layer loop's blocks (cuda_deepseek_blocks.h)
  // The step's index arrays, uploaded into `scratch`; `absorbed`: one query row per new token over the latent cache
  // (else each sequence's context expanded).
  StepPlan make_plan(const ForwardBatch& batch, bool absorbed, ScratchPool& scratch) const;
  // Layer `l`'s weights (model.layers.<l>.*), its routed experts into `experts` as MoE layer `moe_layer`.
  Layer upload_layer(const DeviceWeightSource& weights, int64_t l, CudaExpertStore& experts, int64_t moe_layer);
  // The MTP module over `batch` up to its fp32 logits [rows, vocab] on the device (in mtp_scratch_, which it resets).
  // With `device_inputs`, its token ids and logits rows (one a sequence) are those on the device, not the batch's, in
  // mtp_scratch_ already (the caller resets it).
  struct MtpDeviceInputs {
    const int32_t* token_ids;  // [T]
    const int32_t* row_ids;    // [sequences]
  };
  float* mtp_logits(const ForwardBatch& batch, std::span<const int64_t> hidden_rows, KvCache& cache, int64_t* rows,
                    const MtpDeviceInputs* device_inputs = nullptr) const;
  int64_t num_cache_layers() const { return config_.num_hidden_layers + (mtp_enabled_ ? 1 : 0); }
  // The MTP module's steps run the absorbed attention when no sequence has more rows than this (decode and verify
  // steps: one, or the accepted drafts and one), the expanded one otherwise (prompt chunks).
  static constexpr int64_t kMtpAbsorbedMaxRows = 16;
  // Decode steps below CudaMoe::kGroupedMaxPairs (token, expert) pairs replay a captured CUDA graph.
  float* run_to_logits(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                       int64_t* rows) const override;
  // KV splits of the decode attention for this many sequences, the longest `max_len` tokens.
  int64_t decode_splits(int64_t num_tokens, int64_t max_len) const;
  // --batch-invariant: the decode attention splits every sequence's keys in chunks of this many (from its first
  // key), whatever the batch — a fixed partition per sequence, so a long sequence still spreads over many blocks
  // (one split for every sequence left a batch-1 step of DeepSeek-V2-Lite at 4.3x the default's time; a fixed 16
  // splits cost small sequences and prefill rows 16 partials each). At least 256 keys, and few enough chunks for
  // the longest sequence the model takes (cuda::kMlaDecodeMaxSplits).
  int64_t invariant_keys_per_split() const;
  // Its rows launched in groups whose partial sums fit this workspace (a prefill step's rows would need gigabytes).
  static constexpr int64_t kInvariantWorkspaceBytes = int64_t{256} << 20;
  // The decode attention's splits and the prefill attention on warpgroup MMAs where the kernels take the shape
  // (mla_decode_wgmma.cuh, mla_prefill_wgmma.cuh); DEEPINFER_MLA_WGMMA=0 keeps the mma.sync kernels (an A/B run's
  // A side); DEEPINFER_MLA_SEESAW=1 takes the decode kernel whose warpgroups work on alternate tiles
  // (mla_decode_seesaw.cuh), DEEPINFER_MLA_PREFILL_TMA=1 the prefill kernel of 128-row tiles and TMA-fed stages
  // (mla_prefill_tma.cuh): neither the default yet, not yet measured.
  static cuda::MlaDecodeKernel mla_decode_kernel_from_environment();
  static cuda::MlaPrefillKernel mla_prefill_kernel_from_environment();
  const cuda::MlaDecodeKernel mla_decode_kernel_ = mla_decode_kernel_from_environment();
  const cuda::MlaPrefillKernel mla_prefill_kernel_ = mla_prefill_kernel_from_environment();

  Mlp upload_mlp(const DeviceWeightSource& weights, const std::string& prefix, int64_t inter);
  // The tile of the FP8 weights held as stored (a square quantization block, a multiple of 16: the kernels read 16
  // codes under one scale); 0: every weight bf16 (a bf16 checkpoint, or tiles the kernels do not read).
  int64_t fp8_block_ = 0;
  Bf16* transposed_w_uk(const Bf16* kv_b);  // Attention::w_uk_t from a layer's kv_b on the device

  // A layer's attention over the plan's rows, every row's latent into `cache_layer`; out [T, hidden], or with
  // `read_rows` (device indices into the plan's rows) the attention of those num_read rows only, out
  // [num_read, hidden].
  void attention(int64_t layer_idx, const Attention& w, const StepPlan& plan, Bf16* cache_layer, const Bf16* h,
                 Bf16* out, ScratchPool& scratch, const int32_t* read_rows = nullptr, int64_t num_read = 0) const;

  std::vector<Layer> layers_;
  const Bf16* embed_ = nullptr;
  const Bf16* final_norm_ = nullptr;
  const Bf16* lm_head_ = nullptr;
  DeviceArray<float> inv_freq_;
  float attention_factor_ = 1.0f;
  std::unique_ptr<Mtp> mtp_;       // null: the weights have no MTP layer
  bool mtp_enabled_ = false;
  // With it: the last step's final-normed hidden states [rows, hidden] (in scratch_), and the module's own pool.
  mutable const Bf16* last_hidden_ = nullptr;
  mutable int64_t last_hidden_rows_ = 0;
  mutable ScratchPool mtp_scratch_;
};

}  // namespace deepinfer
