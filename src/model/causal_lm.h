// The interfaces between the engine and a model backend (the CPU reference, or CUDA):
//  - KvCache: a paged cache of per-token, per-layer entries in blocks of kBlockSize tokens, owned by the
//    backend (host fp32 or device bf16). The engine only moves whole sequences in and out (KV handoff).
//  - CausalLm: runs a ForwardBatch against a KvCache and returns logits on the host; computes one routed
//    expert on host data for expert-parallel executors.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/expert_executor.h"
#include "src/model/forward_batch.h"
#include "src/model/model_config.h"

namespace deepinfer {

class KvCache {
 public:
  static constexpr int64_t kBlockSize = 64;
  virtual ~KvCache() = default;

  virtual int64_t num_blocks() const = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t entry_dim() const = 0;
  virtual size_t bytes() const = 0;
  // The entries of positions [0, count) of one sequence, as fp32 [layer][position][entry_dim].
  virtual void export_entries(std::span<const int32_t> block_table, int64_t count, float* dst) const = 0;
  virtual void import_entries(std::span<const int32_t> block_table, int64_t count, const float* src) = 0;
  // Every entry of every block set to seeded N(0, 1) values (benchmarks fabricate long contexts this way).
  virtual void fill_random(uint64_t seed) = 0;
};

// How to draw one token from one row of a step's logits (the engine's SamplingParams, flattened): greedy when
// temperature <= 0; `position` is where the token will land, which indexes the request's Philox stream.
struct SamplingRow {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int64_t position = 0;
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const = 0;
  // Runs the batch, writing the new tokens' KV into `cache` (made by this model). Returns fp32 logits on the
  // host: one row per sequence (its last new token), or one per new token with all_logits. Routed experts are
  // reached through `experts` (all local when null). An empty batch still calls `experts` for every MoE
  // layer, so a rank with no work joins its expert-parallel group's exchanges.
  virtual Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertExecutor* experts = nullptr) const = 0;

  // Backends that sample where the logits are (CUDA: only the tokens come back, not rows x vocab floats).
  // forward_and_sample runs the batch like forward() and draws one token per logits row with `rows`.
  virtual bool samples_on_device() const { return false; }
  virtual std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertExecutor* experts,
                                                  std::span<const SamplingRow> rows) const;

  int64_t num_moe_layers() const { return config().num_hidden_layers - config().first_k_dense_replace; }
  // out [n, hidden] = routed expert `expert` of MoE layer `moe_layer_idx` applied to x [n, hidden] (host fp32).
  virtual void compute_expert(int64_t moe_layer_idx, int64_t expert, const float* x, int64_t n, float* out) const = 0;
  virtual bool has_expert(int64_t moe_layer_idx, int64_t expert) const = 0;
  // Bytes of KV cache one token takes over all layers (sizes the cache from a memory budget).
  virtual size_t kv_cache_bytes_per_token() const = 0;

  // Moving routed experts between ranks (EPLB): an expert's weights as host fp32, gate [I, H], up [I, H] and
  // down [H, I] one after the other (3 * I * H floats); installing them; and freeing an expert no longer held.
  virtual std::vector<float> export_expert(int64_t moe_layer_idx, int64_t expert) const = 0;
  virtual void import_expert(int64_t moe_layer_idx, int64_t expert, std::span<const float> weights) = 0;
  virtual void drop_expert(int64_t moe_layer_idx, int64_t expert) = 0;
  int64_t expert_floats() const { return 3 * config().moe_intermediate_size * config().hidden_size; }

  // How long the device sat idle between the end of the previous step's work and the start of the last step
  // (host post-processing and preparation), in ms; negative where the backend does not measure it (the CPU).
  virtual double device_idle_before_last_step_ms() const { return -1.0; }
};

// Throws if the batch's sequences do not account for its tokens or a token is outside the vocabulary.
void check_batch(const ForwardBatch& batch, int64_t vocab);

// The CPU models' last step: the final RMSNorm and the LM head over the rows of `hidden` [T, hidden_size] whose
// logits the batch wants (ForwardBatch::logits_rows). Returns [rows, vocab].
Tensor cpu_final_logits(const ForwardBatch& batch, const float* hidden, const float* norm, const float* head,
                        int64_t hidden_size, int64_t vocab, float eps);

}  // namespace deepinfer
