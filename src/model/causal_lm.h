// The interfaces between the engine and a model backend (the CPU reference, or CUDA):
//  - KvCache: a paged cache of per-token, per-layer entries in blocks of kBlockSize tokens, owned by the
//    backend (host fp32 or device bf16). The engine only moves whole sequences in and out (KV handoff).
//  - CausalLm: runs a ForwardBatch against a KvCache and returns logits on the host; its routed experts are
//    an ExpertStore (what EPLB moves between ranks). Backends that run on a device add DeviceSteps, checkpoints with
//    draft layers a DraftModule.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "src/core/tensor.h"
#include "src/model/device_steps.h"
#include "src/model/draft_module.h"
#include "src/model/expert_dispatch.h"
#include "src/model/expert_store.h"
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

// Structured output's vocabulary masks for a step's logits rows (engine/structured_output.h): `words` 32-bit words a
// row, bit v % 32 of word v / 32 set where token v is admitted; rows whose `masked` is 0 are not masked. Empty
// (words 0): no row is.
struct TokenMasks {
  int64_t words = 0;
  std::vector<uint32_t> bits;   // [rows, words]
  std::vector<uint8_t> masked;  // [rows]
  bool empty() const { return words == 0; }
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::unique_ptr<KvCache> make_kv_cache(int64_t num_blocks) const = 0;
  // Runs the batch, writing the new tokens' KV into `cache` (made by this model). Returns fp32 logits on the
  // host: one row per sequence (its last new token), or one per new token with all_logits. Routed tokens go
  // through `experts`' dispatch and combine (all experts local when null). An empty batch still dispatches
  // for every MoE layer, so a rank with no work joins its expert-parallel group's exchanges.
  virtual Tensor forward(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts = nullptr) const = 0;

  int64_t num_moe_layers() const { return config().num_hidden_layers - config().first_k_dense_replace; }
  // The routed experts this rank holds.
  virtual ExpertStore& experts() = 0;
  virtual const ExpertStore& experts() const = 0;
  // Bytes of KV cache one token takes over all layers (sizes the cache from a memory budget).
  virtual size_t kv_cache_bytes_per_token() const = 0;
  // Values [0, n) of every layer's transfer entry that are sliding-window state only (DeepSeek-V4.1's window K=V,
  // on the CPU model, which can replay it: SequenceChunk::swa_floor); 0: none, or no replay.
  virtual int64_t window_state_values() const { return 0; }

  // What some backends add, each behind its own interface (null where this one has none): steps run on a device
  // (sampling there, steps started early, CUDA graphs: device_steps.h), and the checkpoint's draft module
  // (draft_module.h), loaded where the checkpoint has one.
  virtual const DeviceSteps* device_steps() const { return nullptr; }
  DeviceSteps* device_steps() { return const_cast<DeviceSteps*>(std::as_const(*this).device_steps()); }
  virtual const DraftModule* draft_module() const { return nullptr; }
  DraftModule* draft_module() { return const_cast<DraftModule*>(std::as_const(*this).draft_module()); }
};

// The model's draft module; an InputError where the checkpoint has none (it cannot draft).
DraftModule& require_draft_module(CausalLm& model);

// Throws if the batch's sequences do not account for its tokens or a token is outside the vocabulary.
void check_batch(const ForwardBatch& batch, int64_t vocab);

// The CPU models' last step: the final RMSNorm and the LM head over the rows of `hidden` [T, hidden_size] whose
// logits the batch wants (ForwardBatch::logits_rows). Returns [rows, vocab].
Tensor cpu_final_logits(const ForwardBatch& batch, const float* hidden, const float* norm, const float* head,
                        int64_t hidden_size, int64_t vocab, float eps);

}  // namespace deepinfer
