// A checkpoint's draft module (its num_nextn_predict_layers layers), speculative decoding's drafter where the
// checkpoint has one: DeepSeek-V3's multi-token-prediction layer (Kind::kMtp) or DeepSeek-V4.1's DSpark drafter
// (Kind::kDspark). A model gives it through CausalLm::draft_module() (null where none was loaded); the engine's
// MtpDrafter and DsparkDrafter (src/engine) draft through it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/core/tensor.h"
#include "src/model/forward_batch.h"

namespace deepinfer {

class KvCache;

// One drafted token of V3's MTP module: the most likely token (ties to the lowest id) and its probability, the
// draft's confidence.
struct MtpDraft {
  int32_t token = 0;
  float confidence = 0;
};

// A sequence's block of drafted tokens, each with its confidence.
struct DraftBlock {
  std::vector<int32_t> tokens;
  std::vector<double> confidence;
  int64_t position = -1;  // p, the anchor's position (where the first drafted token follows)
};

class DraftModule {
 public:
  enum class Kind { kMtp, kDspark };
  virtual ~DraftModule() = default;

  virtual Kind kind() const = 0;
  // Enabling it, before make_kv_cache: the caches made after hold its layers too, so that KV handoffs carry them.
  virtual void enable() = 0;
  virtual bool enabled() const = 0;
  // Tokens one draft gives a sequence: V3's MTP module one, DSpark its block size.
  virtual int64_t block_size() const = 0;

  // V3's MTP module, once enabled: every forward of the model (forward, forward_and_sample, start_forward_and_sample)
  // keeps its rows' final-normed hidden states where they were computed (host or device) until the next forward.
  // mtp_forward runs the module over `batch`, whose token_ids are the tokens that follow each row's position, given the
  // kept hidden states of those positions (`hidden_rows`: a row of the last forward per token of `batch`): writes its
  // cache layer at the positions and returns the draft logits of the batch's logits rows (the token after the next
  // one) on the host. mtp_draft drafts the same way: per logits row its MtpDraft (backends that sample on the device
  // draw them there; only the drafts come back).
  virtual Tensor mtp_forward(const ForwardBatch& batch, std::span<const int64_t> hidden_rows, KvCache& cache) const;
  virtual std::vector<MtpDraft> mtp_draft(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                          KvCache& cache) const;

  // DSpark, once enabled: every forward of the model also writes, for each of its rows, the draft layers' window keys
  // (from the main model's features at the target layers), and dspark_draft drafts blocks. `anchors` holds per
  // sequence one row: its last token, at position p = num_cached (the rows below are cached). Returns per sequence
  // block_size() drafted tokens (drawn one after the other with the Markov term, each from the sequence's row of
  // `rows` at the draft's position: greedy, or the request's sampling on the draft's own random stream) and each
  // draft's confidence.
  virtual std::vector<DraftBlock> dspark_draft(const ForwardBatch& anchors, KvCache& cache,
                                               std::span<const SamplingRow> rows) const;

  // Drafts chained behind their verify step (the engine's overlapped scheduling with the model's drafter), on backends
  // that start steps asynchronously (DeviceSteps): a verify step started with start_forward_and_sample (ForwardBatch::
  // speculative_verify) also finds, where its tokens are, how many drafts each of its sequences accepts and the token
  // after them; start_chained_draft then queues the draft of that step's sequences (a block each, in its order: DSpark's
  // block_size tokens, `rows` one per sequence as dspark_draft's; V3's MTP module one token, its module run over every
  // row of the verify step and read at the last accepted one) behind it, each anchored at the position its sequence's
  // acceptance reaches, and returns at once. So the device drafts while the host postprocesses the verify step and
  // prepares the next one, whose draft rows may name the started draft's tokens (ForwardBatch::tokens_from_draft).
  // finish_chained_draft waits for the blocks (DraftBlock::position: where acceptance put each; MTP's confidence is its
  // draft's probability). One draft outstanding at a time.
  virtual bool chains_drafts() const { return false; }
  virtual void start_chained_draft(const ForwardBatch& verify, KvCache& cache, std::span<const SamplingRow> rows) const;
  virtual std::vector<DraftBlock> finish_chained_draft() const;
};

}  // namespace deepinfer
