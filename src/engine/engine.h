// Engine: one rank's generation loop. step() reads schedule -> run -> postprocess; the scheduler decides
// what runs, the model runs it, the sampler and scheduler record the outcome.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/engine/block_manager.h"
#include "src/engine/model_drafter.h"
#include "src/engine/request.h"
#include "src/engine/scheduler.h"
#include "src/engine/sequence.h"
#include "src/engine/speculation.h"
#include "src/engine/structured_output.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

// DeepSeek-V4.1's bounded decoder replay (DeepInfer's YoCo prefill truncation): the decoder layers (from the first
// of compress ratio 1) own nothing but window KV, so a prompt's prefill need only get their last keep_tokens
// right. mask: those layers' windows see no position before the prompt's last keep_tokens (an approximation of
// the exact prefill, used to start decoding; decode steps are unaffected, keep_tokens >= window + backtracking).
// Such a sequence neither shares nor takes prefix-cache blocks (its decoder KV is not the exact one). compact: the
// same logits with the rows themselves dropped from v41_first_compact_layer on (ForwardBatch::compact_replay),
// which saves their compute; EngineStats counts the rows a layer skipped.
struct ReplayOptions {
  enum class Mode { kOff, kMask, kCompact };
  Mode mode = Mode::kOff;
  int64_t keep_tokens = 0;
};

struct EngineOptions {
  int64_t kv_cache_tokens = 16384;  // KV cache capacity, rounded up to whole blocks
  SchedulerLimits limits;
  ExpertDispatcher* experts = nullptr;  // null: every expert local
  bool prefix_cache = false;  // share the blocks of common prompt prefixes (BlockManager)
  // The prefix cache's directory tier (implies prefix_cache; empty: none), and what the KV depends on beyond
  // the tokens (checkpoint, format, seed, depth; the engine adds the device): KvStore.
  std::string kv_store_dir;
  std::string kv_store_model_key;
  // SWA replay: the tokens a prefix hit from the store recomputes the window of, where the model has window state
  // (DeepSeek-V4.1 on the CPU); 0: the store keeps the window too and hits are exact.
  int64_t swa_replay_tokens = 128;
  ReplayOptions replay;
  SpeculationOptions speculation;  // decode steps verify drafts (speculation.h); off unless num_drafts > 0
  // Structured output (structured_output.h): constrained requests' matchers and masks; needed when a request has
  // a constraint. Outlives the engine.
  StructuredOutput* structured = nullptr;
  // Requests' stop sequences (stop_sequences.h): a sequence ends at the token that completes one. Null: they are
  // not watched (the writers still cut the content there, but the engine runs on to the length or the EOS).
  // Outlives the engine.
  StopSequences* stops = nullptr;
  // Every result carries, per output token, the fingerprint of the logits row it was drawn from (before masks):
  // a bit-level check of batch invariance (--logits-hashes).
  bool logits_hashes = false;
  // Every result carries its prompt's token ids as the model saw them (a continuation's whole conversation, a chat
  // request's rendered template): what was sent, for the user to check (generate --echo-prompt).
  bool echo_prompt = false;
  // Overlapped scheduling: step N + 1 is scheduled and started before step N's tokens are postprocessed, its inputs
  // naming them by placeholder (Scheduler::launched / completed). Not with structured output or the prefill role's
  // handoffs (the engine runs in order there). With speculative decoding: where the model's own drafter drafts (MTP
  // or DSpark) on a backend that chains drafts (DraftModule::chains_drafts), each verify step's draft is queued behind it
  // and the host postprocesses the step and prepares the next while the device drafts (Engine::step); the
  // variable-length rule then waits for the draft before it lays out the next step (it reads the draft's
  // confidences), so only the preparation that follows is not hidden. The controlled drafter runs in order.
  bool overlap_schedule = false;
};

// A prefilled sequence on its way from a prefill rank to a decode rank: its tokens (prompt and first sampled
// token) and the latent KV of its prompt, [layer][position][kv_entry_dim].
struct PrefilledSequence {
  int64_t request_index = 0;
  std::vector<int32_t> tokens;
  std::vector<float> kv;
  std::vector<uint64_t> logits_hashes;  // with EngineOptions::logits_hashes: the first token's
};

// Generated tokens of a request since the last report: `tokens` at output positions [first, first + size).
struct TokenUpdate {
  int64_t request_index = 0;
  int64_t first = 0;
  std::vector<int32_t> tokens;
};

struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_prefill_tokens = 0;
  int64_t num_decode_tokens = 0;
  double prefill_s = 0.0;
  double decode_s = 0.0;
  // Bounded replay: prompt rows below the floor in prefill steps (the rows the decoder layers need not compute),
  // and with the compact form the (row, layer) pairs it dropped.
  int64_t replay_rows_below_floor = 0;
  int64_t replay_skipped_layer_rows = 0;
  SpeculationStats speculation;  // verify steps' drafts: proposed, verified, accepted, calibration
  // Where the backend measures it (CUDA): the device's idle time before each step, from the previous step's last
  // kernel to this step's first (the host's work between steps showing through); with a model drafter, also from
  // the verify step's last kernel to the draft's first.
  int64_t device_idle_steps = 0;
  double device_idle_ms = 0.0;
};

class Engine {
 public:
  Engine(const CausalLm& model, EngineOptions options);
  ~Engine();

  // Checks the request against the model and the cache (InputError naming the request and what is wrong).
  void validate(const Request& request) const { validate(model_.config(), options_, request); }
  static void validate(const ModelConfig& config, const EngineOptions& options, const Request& request);
  // The checks of a request's constraint that need no grammar (validate makes them; so does render, which compiles
  // none): no ignore_eos, forced tokens inside the vocabulary.
  static void validate_constraint(const ModelConfig& c, const Request& request, const std::string& who);
  void add_request(const Request& request);  // the request must outlive the engine
  // Drops the requests no step has started yet and returns their indices (Scheduler::take_unstarted): they will
  // not finish here.
  std::vector<int64_t> drop_unstarted();
  bool has_unfinished() const { return scheduler_.has_unfinished() || in_flight_.has_value(); }
  // Whether steps overlap (EngineOptions::overlap_schedule, where the engine's other options allow it).
  bool overlaps_steps() const { return overlap_ || chain_drafts_; }
  // One schedule -> run -> postprocess. With nothing scheduled it still runs an empty forward, so that
  // this rank joins its expert-parallel group's exchanges.
  void step();
  void run_to_completion();

  // Prefill role: the sequences prefilled since the last call, with their KV copied out and their blocks freed.
  std::vector<PrefilledSequence> take_handoffs();
  // Decode role: admits a sequence prefilled elsewhere, if its blocks fit now (false: try again later).
  bool add_prefilled(const Request& request, const PrefilledSequence& prefilled);
  // Benchmarks: admits a sequence as if all but the last of `tokens` were prefilled, their KV being whatever
  // the cache holds there (fill_cache_random first), so that steps run at a chosen context without the prefill.
  bool add_cached(const Request& request, std::vector<int32_t> tokens);
  void fill_cache_random(uint64_t seed) { cache_->fill_random(seed); }
  // Results of the sequences finished since the last call.
  std::vector<RequestResult> take_finished();
  // The tokens every sequence generated since the last call (streaming output).
  std::vector<TokenUpdate> take_new_tokens();

  // Results in the order requests were added.
  std::vector<RequestResult> results() const;
  RequestResult result_of(const Sequence& seq) const;
  const EngineStats& stats() const { return stats_; }
  int64_t num_preemptions() const { return scheduler_.num_preemptions(); }
  // Prompt tokens that came from the prefix cache instead of being computed; of them, those read from --kv-store.
  // Whether the prefix cache is on (--prefix-cache, or implied by a --kv-store).
  bool shares_prefixes() const { return options_.prefix_cache; }
  int64_t prefix_hit_tokens() const { return blocks_.hit_tokens(); }
  int64_t prefix_store_tokens() const { return blocks_.loaded_tokens(); }
  int64_t prefix_replayed_tokens() const { return blocks_.replayed_tokens(); }

 private:
  // A sequence of `tokens` whose all but last are cached, into the running set if its blocks fit now; its KV
  // imported from `kv` unless that is null.
  bool admit_cached(const Request& request, std::vector<int32_t> tokens, const float* kv);
  // A verify step's drafts: per item, what the drafter proposed and how many of them the step verifies (empty
  // unless this is a decode step with speculation on); the blocks for the verified rows are taken here.
  struct StepDrafts {
    std::vector<DraftProposal> proposals;
    std::vector<int64_t> num_verified;
    // Structured output: per item, the masks of rows 0..(drafts the grammar admits) (empty: unconstrained).
    std::vector<std::vector<uint32_t>> masks;
    bool empty() const { return proposals.empty(); }
  };
  // The parts of step(), in its order: the batch (checked: something runs while sequences wait), its drafts (the
  // draft in flight settled first unless the step chains on it), the model run (in order or chained: the tokens
  // each sampling item emits), the postprocess (the scheduler takes the tokens; constraints, drafters, the KV store
  // follow; returns the step's tokens) and its statistics.
  ScheduledBatch schedule();
  StepDrafts drafts_for(const ScheduledBatch& batch, bool chained);
  std::vector<std::vector<int32_t>> run(const ForwardBatch& forward, const ScheduledBatch& batch, StepDrafts& drafts,
                                        bool chained);
  int64_t postprocess(const ScheduledBatch& batch, const ForwardBatch& forward,
                      const std::vector<std::vector<int32_t>>& emitted, bool chained);
  void record_step(const ScheduledBatch& batch, const ForwardBatch& forward, bool verified, int64_t tokens,
                   std::chrono::steady_clock::time_point start);
  StepDrafts propose_drafts(const ScheduledBatch& batch);
  // How many drafts each item verifies: all that fit the request's limits, or the variable-length rule's choice.
  std::vector<int64_t> verify_lengths(const std::vector<DraftProposal>& proposals);
  ForwardBatch build_forward_batch(const ScheduledBatch& batch, const StepDrafts& drafts) const;
  // Structured output: the vocabulary masks of the step's logits rows (empty where no sequence is constrained).
  TokenMasks token_masks(const ScheduledBatch& batch, const StepDrafts& drafts) const;
  // After postprocess: constrained sequences' matchers take the tokens they were given; finished ones record whether
  // their output is whole.
  void advance_constraints(const ScheduledBatch& batch);
  // Runs the batch and samples every logits row; returns, per sampling item, the tokens it emits.
  std::vector<std::vector<int32_t>> run_and_sample(const ForwardBatch& forward, const ScheduledBatch& batch,
                                                   const StepDrafts& drafts, const TokenMasks& masks);
  // The tokens each item emits from the step's drawn rows (and their fingerprints, where wanted): a verify step's
  // accepted drafts and the token after them.
  std::vector<std::vector<int32_t>> emitted_tokens(const ScheduledBatch& batch, const StepDrafts& drafts,
                                                   const std::vector<int32_t>& drawn,
                                                   const std::vector<uint64_t>& hashes);
  // Chained drafts (chain_drafts_): a decode step's verify is started, the draft in flight (the one it verifies)
  // settled, the next draft started behind the verify, then the verify's tokens waited for.
  std::vector<std::vector<int32_t>> run_chained(const ForwardBatch& forward, const ScheduledBatch& batch,
                                                StepDrafts& drafts);
  // The draft rows still in flight take their tokens from the draft on the device (ForwardBatch::tokens_from_draft).
  void link_draft_inputs(const ScheduledBatch& batch, const StepDrafts& drafts, ForwardBatch& forward) const;
  // Waits for the draft in flight, if any, and hands its blocks to the drafter; whether there was one.
  bool settle_draft();
  void record_verify_time(int64_t rows, double ms);
  // Overlapped scheduling: a started step whose tokens the scheduler has not taken yet.
  struct InFlight {
    ScheduledBatch batch;
    std::vector<std::vector<int32_t>> emitted;  // per sampling item
    std::vector<std::vector<uint64_t>> hashes;  // per batch item (with options_.logits_hashes)
  };
  void step_overlapped();
  // The inputs still naming a token in flight (kPendingToken) take it from in_flight_'s samples: on the host, or
  // with device_tokens_ as the rows of in_flight_'s tokens on the device (ForwardBatch::tokens_from_previous_step).
  void link_pending_inputs(const ScheduledBatch& batch, ForwardBatch& forward) const;
  // The scheduler takes a started step's tokens (with device_tokens_, first waiting for them).
  void complete(InFlight& step);
  // One per logits row of the step (each item's, then its drafts').
  std::vector<SamplingRow> sampling_rows(const ScheduledBatch& batch, const StepDrafts& drafts) const;
  void count_replay_rows(const ForwardBatch& forward);
  // Once a step's model calls are done: the backend's idle time before them (the step's forward, and a model drafter's
  // call after it), where measured.
  void note_device_idle();
  // Whether a sequence of this prompt length may take and register prefix-cache blocks.
  bool shares_blocks(int64_t prompt_tokens) const;

  class StoreTier;  // the KvStore as the block manager's slower tier (engine.cpp)

  const CausalLm& model_;
  const DeviceSteps* device_;  // model_.device_steps(): null on a host backend
  EngineOptions options_;
  std::unique_ptr<KvCache> cache_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::unique_ptr<StoreTier> store_;  // with --kv-store
  std::vector<std::unique_ptr<Sequence>> sequences_;
  EngineStats stats_;
  // With SpeculationOptions::model_drafter, the one for the model's module (MTP or DSpark).
  std::unique_ptr<ModelDrafter> model_drafter_;
  // With options_.logits_hashes: per batch item of the step, the fingerprints of the rows its emitted tokens came
  // from (in emitted order; the scheduler may keep fewer).
  std::vector<std::vector<uint64_t>> step_hashes_;
  bool overlap_ = false;
  bool device_tokens_ = false;  // overlap_ with a backend that starts steps asynchronously (DeviceSteps::samples_async)
  // Overlapped scheduling with speculation: the model drafter's drafts chained behind their verify steps
  // (EngineOptions::overlap_schedule), and whether one is in flight.
  bool chain_drafts_ = false;
  bool draft_in_flight_ = false;
  std::optional<InFlight> in_flight_;
  DeviceIdle idle_noted_;  // the model's idle totals when last noted
  VerifyCostTable verify_cost_;     // the variable-length rule's cost curve
  int64_t verify_warmup_done_ = 0;  // verify steps of its warm-up so far
};

}  // namespace deepinfer
