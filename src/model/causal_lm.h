// The interfaces between the engine and a model backend (the CPU reference, or CUDA):
//  - KvCache: a paged cache of per-token, per-layer entries in blocks of kBlockSize tokens, owned by the
//    backend (host fp32 or device bf16). The engine only moves whole sequences in and out (KV handoff).
//  - CausalLm: runs a ForwardBatch against a KvCache and returns logits on the host; its routed experts are
//    an ExpertStore (what EPLB moves between ranks).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "src/core/tensor.h"
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

// How to draw one token from one row of a step's logits (the engine's SamplingParams, flattened): greedy when
// temperature <= 0; `position` is where the token will land, which indexes the request's Philox stream.
using SamplingRow = cpu::SamplingRow;

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

  // Backends that sample where the logits are (CUDA: only the tokens come back, not rows x vocab floats).
  // forward_and_sample runs the batch like forward() and draws one token per logits row with `rows`, each masked
  // row drawn among the tokens its mask admits (`masks` may be null: none); logits_hashes (may be null: not wanted)
  // [rows] takes each row's fingerprint before any mask (cpu::logits_row_hashes).
  virtual bool samples_on_device() const { return false; }
  // Values [0, n) of every layer's transfer entry that are sliding-window state only (DeepSeek-V4.1's window K=V,
  // on the CPU model, which can replay it: SequenceChunk::swa_floor); 0: none, or no replay.
  virtual int64_t window_state_values() const { return 0; }
  virtual std::vector<int32_t> forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                                  std::span<const SamplingRow> rows, const TokenMasks* masks,
                                                  uint64_t* logits_hashes) const;

  // Overlapped scheduling with the tokens left on the device: start_forward_and_sample queues a step like
  // forward_and_sample (no masks), whose inputs may be tokens the step started before it samples
  // (ForwardBatch::tokens_from_previous_step), and returns before its own tokens exist; finish_forward_and_sample
  // waits for the oldest started step's tokens (and fingerprints into logits_hashes, when the step asked for them).
  // Steps finish in the order they started, at most two outstanding. Backends without it (samples_async false)
  // refuse both.
  virtual bool samples_async() const { return false; }
  virtual void start_forward_and_sample(const ForwardBatch& batch, KvCache& cache, ExpertDispatcher* experts,
                                        std::span<const SamplingRow> rows, bool logits_hashes) const;
  virtual std::vector<int32_t> finish_forward_and_sample(uint64_t* logits_hashes) const;

  // The checkpoint's draft module (its num_nextn_predict_layers layers: DeepSeek-V3's multi-token-prediction layer,
  // DeepSeek-V4.1's DSpark drafter), speculative decoding's drafter where the checkpoint has one: whether it was
  // loaded, and enabling it, before make_kv_cache (the caches made after hold its layers too, so that KV handoffs
  // carry them).
  virtual bool has_mtp() const { return false; }
  virtual void enable_mtp();
  // DeepSeek-V3's MTP module, once enabled: every forward (forward, forward_and_sample, start_forward_and_sample)
  // keeps its rows' final-normed hidden states where they were computed (host or device) until the next forward.
  // mtp_forward runs the module over `batch`, whose token_ids are the tokens that follow each row's position, given
  // the kept hidden states of those positions (`hidden_rows`: a row of the last forward per token of `batch`):
  // writes its cache layer at the positions and returns the draft logits of the batch's logits rows (the token
  // after the next one) on the host.
  virtual Tensor mtp_forward(const ForwardBatch& batch, std::span<const int64_t> hidden_rows, KvCache& cache) const;
  // The same, drafting: per logits row the most likely token (ties to the lowest id) and its probability, the
  // draft's confidence. Backends that sample on the device draw them there (only the drafts come back).
  struct MtpDraft {
    int32_t token = 0;
    float confidence = 0;
  };
  virtual std::vector<MtpDraft> mtp_draft(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                          KvCache& cache) const;

  // DeepSeek-V4.1's DSpark drafter, once enabled (enable_mtp): every forward() also writes, for each of its rows,
  // the draft layers' window keys (from the main model's features at the target layers), and dspark_draft drafts
  // blocks. The block size, 0 where the model has no DSpark drafter enabled.
  virtual int64_t dspark_block_size() const { return 0; }
  // `anchors` holds per sequence one row: its last token, at position p = num_cached (the rows below are cached).
  // Returns per sequence dspark_block_size() drafted tokens (drawn one after the other with the Markov term, each
  // from the sequence's row of `rows` at the draft's position: greedy, or the request's sampling on the draft's own
  // random stream) and each draft's confidence.
  struct DraftBlock {
    std::vector<int32_t> tokens;
    std::vector<double> confidence;
    int64_t position = -1;  // p, the anchor's position (where the first drafted token follows)
  };
  virtual std::vector<DraftBlock> dspark_draft(const ForwardBatch& anchors, KvCache& cache,
                                               std::span<const SamplingRow> rows) const;
  // Drafts chained behind their verify step (the engine's overlapped scheduling with the model's drafter), on backends
  // that start steps asynchronously: a verify step started with start_forward_and_sample (ForwardBatch::
  // speculative_verify) also finds, where its tokens are, how many drafts each of its sequences accepts and the token
  // after them; start_chained_draft then queues the draft of that step's sequences (a block each, in its order: DSpark's
  // dspark_block_size tokens, `rows` one per sequence as dspark_draft's; V3's MTP module one token, its module run over
  // every row of the verify step and read at the last accepted one) behind it, each anchored at the position its
  // sequence's acceptance reaches, and returns at once. So the device drafts while the host postprocesses the verify
  // step and prepares the next one, whose draft rows may name the started draft's tokens (ForwardBatch::
  // tokens_from_draft). finish_chained_draft waits for the blocks (DraftBlock::position: where acceptance put each;
  // MTP's confidence is its draft's probability). One draft outstanding at a time.
  virtual bool chains_drafts() const { return false; }
  virtual void start_chained_draft(const ForwardBatch& verify, KvCache& cache, std::span<const SamplingRow> rows) const;
  virtual std::vector<DraftBlock> finish_chained_draft() const;

  int64_t num_moe_layers() const { return config().num_hidden_layers - config().first_k_dense_replace; }
  // The routed experts this rank holds.
  virtual ExpertStore& experts() = 0;
  virtual const ExpertStore& experts() const = 0;
  // Bytes of KV cache one token takes over all layers (sizes the cache from a memory budget).
  virtual size_t kv_cache_bytes_per_token() const = 0;

  // How long the device sat idle between the end of one model call's work and the start of the next (host
  // post-processing and preparation showing through), summed since the model was made: the gaps measured and their
  // ms. A step with a model drafter has two calls (the verify step, the draft). {0, 0} where the backend does not
  // measure it (the CPU).
  struct DeviceIdle {
    int64_t gaps = 0;
    double ms = 0.0;
  };
  virtual DeviceIdle device_idle() const { return {}; }
  // Backends that capture decode steps as CUDA graphs replay them unless this turns them off (every step eager);
  // how many steps so far ran from a graph.
  virtual void set_cuda_graphs(bool /*enabled*/) {}
  virtual int64_t graph_replays() const { return 0; }
};

// Throws if the batch's sequences do not account for its tokens or a token is outside the vocabulary.
void check_batch(const ForwardBatch& batch, int64_t vocab);

// The CPU models' last step: the final RMSNorm and the LM head over the rows of `hidden` [T, hidden_size] whose
// logits the batch wants (ForwardBatch::logits_rows). Returns [rows, vocab].
Tensor cpu_final_logits(const ForwardBatch& batch, const float* hidden, const float* norm, const float* head,
                        int64_t hidden_size, int64_t vocab, float eps);

}  // namespace deepinfer
