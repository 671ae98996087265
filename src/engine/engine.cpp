// Engine: the step in its order (schedule -> drafts -> run -> postprocess -> record), admission, results and KV
// handoffs. The ways of calling the model are in engine_model_calls.cpp, speculative decoding in engine_speculation.cpp.
#include "src/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "src/core/log.h"
#include "src/engine/dspark_drafter.h"
#include "src/engine/kv_store.h"
#include "src/engine/mtp_drafter.h"
#include "src/model/v41/v41_config.h"

namespace deepinfer {

namespace {

std::vector<int32_t> eos_ids(const ModelConfig& config) {
  return std::vector<int32_t>(config.eos_token_ids.begin(), config.eos_token_ids.end());
}

SchedulerLimits with_model_len(SchedulerLimits limits, const ModelConfig& config) {
  if (limits.max_model_len == 0 || limits.max_model_len > config.max_position_embeddings)
    limits.max_model_len = config.max_position_embeddings;
  return limits;
}

}  // namespace

// Blocks through the KvStore: loaded into the cache by import_entries, saved by export_entries, one block each.
class Engine::StoreTier final : public BlockManager::Tier {
 public:
  // Where the model has sliding-window state (DeepSeek-V4.1's window K=V) and SWA replay is on, the files hold the
  // block KV only (the window values zeroed; DeepInfer keeps the window state apart, never in the store) and a hit
  // replays its last swa_replay_tokens; their key says so, so the two kinds of file never mix.
  StoreTier(const EngineOptions& options, KvCache& cache, const CausalLm& model)
      : cache_(cache),
        window_values_(options.swa_replay_tokens > 0 ? model.window_state_values() : 0),
        replay_tokens_(window_values_ > 0 ? options.swa_replay_tokens : 0),
        store_(options.kv_store_dir,
               fmt::format("{}|{}{}", options.kv_store_model_key, model.device_steps() != nullptr ? "gpu" : "cpu",
                           window_values_ > 0 ? "|without window state" : ""),
               cache.num_layers(), cache.entry_dim(), KvCache::kBlockSize) {}

  bool may_hold(uint64_t hash) const override { return store_.has(hash); }
  int64_t window_replay_tokens() const override { return replay_tokens_; }
  bool load(const Sequence& seq, int64_t index, uint64_t hash, uint64_t parent_hash, int32_t block) override {
    if (!store_.load(hash, parent_hash, block_tokens(seq, index), entries_)) return false;
    cache_.import_entries(std::span<const int32_t>(&block, 1), KvCache::kBlockSize, entries_.data());
    return true;
  }
  void save(const Sequence& seq, const BlockManager::RegisteredBlock& b) {
    entries_.resize(cache_.num_layers() * KvCache::kBlockSize * cache_.entry_dim());
    cache_.export_entries(std::span<const int32_t>(&b.block, 1), KvCache::kBlockSize, entries_.data());
    const int64_t entry_dim = cache_.entry_dim();
    for (size_t e = 0; window_values_ > 0 && e < entries_.size(); e += entry_dim)
      std::fill_n(entries_.begin() + static_cast<int64_t>(e), window_values_, 0.0f);
    store_.save(b.hash, b.parent_hash, block_tokens(seq, b.index), entries_);
  }

 private:
  static std::span<const int32_t> block_tokens(const Sequence& seq, int64_t index) {
    return std::span<const int32_t>(seq.tokens).subspan(index * KvCache::kBlockSize, KvCache::kBlockSize);
  }

  KvCache& cache_;
  int64_t window_values_, replay_tokens_;
  KvStore store_;
  std::vector<float> entries_;  // one block's, reused
};

Engine::Engine(const CausalLm& model, EngineOptions options)
    : model_(model),
      device_(model.device_steps()),
      options_(options),
      cache_(model.make_kv_cache((options.kv_cache_tokens + KvCache::kBlockSize - 1) / KvCache::kBlockSize)),
      blocks_(cache_->num_blocks(), KvCache::kBlockSize, options.prefix_cache || !options.kv_store_dir.empty()),
      scheduler_(with_model_len(options.limits, model.config()), blocks_, eos_ids(model.config())) {
  scheduler_.set_stop_sequences(options.stops);
  options_.limits = with_model_len(options.limits, model.config());
  SpeculationOptions& spec = options_.speculation;
  if (spec.model_drafter) {
    const DraftModule* module = model.draft_module();
    DI_CHECK(module != nullptr && module->enabled(),
             "the model's drafter needs its draft module enabled before the engine is made");
    const bool dspark = module->kind() == DraftModule::Kind::kDspark;
    const int64_t draft_layers = dspark ? model.config().num_nextn_predict_layers : 1;
    DI_CHECK(cache_->num_layers() == model.config().num_hidden_layers + draft_layers,
             "a cache of {} layers for a model of {} and a draft module of {}", cache_->num_layers(),
             model.config().num_hidden_layers, draft_layers);
    if (dspark) {
      DI_CHECK(spec.num_drafts <= module->block_size(), "{} drafts from DSpark blocks of {}", spec.num_drafts,
               module->block_size());
      model_drafter_ = std::make_unique<DsparkDrafter>(*module);
    } else {
      model_drafter_ = std::make_unique<MtpDrafter>(*module);
    }
    spec.drafter = model_drafter_.get();
  }
  DI_CHECK(!spec.enabled() || spec.drafter != nullptr, "speculative decoding without a drafter");
  DI_CHECK(!spec.variable_length || spec.cost_warmup_steps > spec.num_drafts,
           "the variable-length rule's warm-up of {} steps does not verify each of 0..{} drafts once",
           spec.cost_warmup_steps, spec.num_drafts);
  overlap_ = options_.overlap_schedule && !spec.enabled() && options_.structured == nullptr &&
             !options_.limits.handoff_after_prefill;
  chain_drafts_ = options_.overlap_schedule && model_drafter_ != nullptr && options_.structured == nullptr &&
                  !options_.limits.handoff_after_prefill && device_ != nullptr &&
                  device_->samples_async() && model_.draft_module()->chains_drafts();
  if (options_.overlap_schedule && !overlap_ && !chain_drafts_ && !options_.limits.handoff_after_prefill) {
    const char* why = options_.structured != nullptr ? "structured output (the grammar judges each token on the host)"
                      : model_drafter_ == nullptr ? "speculative decoding with the controlled drafter (its drafts "
                                                    "need the verify step's tokens on the host)"
                                                  : "a backend that cannot chain drafts behind their verify step";
    spdlog::info("overlapped scheduling is off: {} runs in order", why);
  }
  if (chain_drafts_)
    spdlog::info("overlapped scheduling with speculative decoding: each {} draft chained behind its verify step{}",
                 model.draft_module()->kind() == DraftModule::Kind::kDspark ? "DSpark" : "MTP",
                 spec.variable_length ? " (--spec-varlen: the next step's layout waits for the draft's confidences)"
                                      : "");
  device_tokens_ = overlap_ && device_ != nullptr && device_->samples_async();
  if (!options_.kv_store_dir.empty()) {
    options_.prefix_cache = true;
    store_ = std::make_unique<StoreTier>(options_, *cache_, model_);
    scheduler_.set_prefix_tier(store_.get());
  }
}

Engine::~Engine() {
  // The stop watch outlives the engine: no parser may stay keyed by a sequence about to go (a run that ended early).
  if (options_.stops != nullptr)
    for (const std::unique_ptr<Sequence>& seq : sequences_) options_.stops->forget(*seq);
  // A chained draft still in flight (a step was abandoned): the model's one outstanding draft is finished, for the
  // next engine on this model.
  if (!draft_in_flight_) return;
  try {
    model_.draft_module()->finish_chained_draft();
  } catch (const std::exception& e) {
    spdlog::warn("finishing the chained draft in flight: {}", e.what());
  }
}

bool Engine::shares_blocks(int64_t prompt_tokens) const {
  // A prompt that bounded replay truncates has decoder KV of its own: it stays out of the prefix cache (and the
  // store), whichever rank holds it.
  return options_.replay.mode == ReplayOptions::Mode::kOff || prompt_tokens <= options_.replay.keep_tokens;
}

void Engine::validate(const ModelConfig& c, const EngineOptions& options, const Request& request) {
  const int64_t max_model_len = with_model_len(options.limits, c).max_model_len;
  const int64_t cache_tokens =
      (options.kv_cache_tokens + KvCache::kBlockSize - 1) / KvCache::kBlockSize * KvCache::kBlockSize;
  const std::string who = fmt::format("request id {}", request.id.dump());
  const auto prompt_len = static_cast<int64_t>(request.prompt_token_ids.size());
  DI_INPUT_CHECK(prompt_len > 0, "{}: empty prompt_token_ids", who);
  DI_INPUT_CHECK(prompt_len < max_model_len,
                 "{}: prompt of {} tokens leaves no room to generate: it must stay below the model's maximum of {} "
                 "positions (prompts that reach it exceed the maximum)", who, prompt_len, max_model_len);
  if (request.constraint) {
    validate_constraint(c, request, who);
    DI_INPUT_CHECK(options.structured != nullptr, "{}: a {} constraint needs the model's tokenizer (the model "
                   "directory's tokenizer.json, or --tokenizer) to mask the vocabulary by", who,
                   request.constraint->kind_name());
  }
  for (int32_t token : request.prompt_token_ids)
    DI_INPUT_CHECK(token >= 0 && token < c.vocab_size, "{}: token id {} is outside the vocabulary [0, {})", who,
                   token, c.vocab_size);
  for (int32_t token : request.sampling.stop_token_ids)
    DI_INPUT_CHECK(token >= 0 && token < c.vocab_size, "{}: stop token id {} is outside the vocabulary [0, {})", who,
                   token, c.vocab_size);
  // Saturating: max_new_tokens may be as large as int64 allows.
  const int64_t longest = request.max_new_tokens >= max_model_len - prompt_len ? max_model_len
                                                                               : prompt_len + request.max_new_tokens;
  DI_INPUT_CHECK(longest <= cache_tokens,
                 "{}: needs {} tokens of KV cache, more than the {} the cache holds (raise --kv-cache-tokens)", who,
                 longest, cache_tokens);
}

void Engine::validate_constraint(const ModelConfig& c, const Request& request, const std::string& who) {
  DI_INPUT_CHECK(!request.sampling.ignore_eos, "{}: a constrained request ends with the model's EOS (at its "
                 "grammar's end, or after its forced tokens): ignore_eos cannot be set", who);
  if (request.constraint->kind != OutputConstraint::Kind::kTokens) return;
  for (const nlohmann::json& id : nlohmann::json::parse(request.constraint->text))
    DI_INPUT_CHECK(id.get<int64_t>() < c.vocab_size, "{}: forced_output_token_ids holds {}, not a token id of the "
                   "vocabulary [0, {})", who, id.dump(), c.vocab_size);
}

void Engine::add_request(const Request& request) {
  validate(request);
  auto seq = std::make_unique<Sequence>();
  seq->idx = static_cast<int64_t>(sequences_.size());
  seq->request = &request;
  seq->tokens = request.prompt_token_ids;
  seq->num_prompt_tokens = seq->num_tokens();
  seq->shares_blocks = shares_blocks(seq->num_prompt_tokens);
  if (options_.structured != nullptr) options_.structured->start(*seq);
  scheduler_.add(seq.get());
  sequences_.push_back(std::move(seq));
}

std::vector<int64_t> Engine::drop_unstarted() {
  std::vector<int64_t> indices;
  for (Sequence* seq : scheduler_.take_unstarted()) {
    if (options_.structured != nullptr) options_.structured->forget(*seq);
    seq->status = SequenceStatus::kFinished;
    indices.push_back(seq->request->index);
  }
  return indices;
}

void Engine::step() {
  if (overlap_) return step_overlapped();
  const auto start = std::chrono::steady_clock::now();
  const ScheduledBatch batch = schedule();
  // Chained drafts: a decode step verifies the draft in flight (its tokens on the device) and starts the next one.
  const bool chained = chain_drafts_ && !batch.is_prefill && !batch.items.empty();
  StepDrafts drafts = drafts_for(batch, chained);
  ForwardBatch forward = build_forward_batch(batch, drafts);
  if (chained) link_draft_inputs(batch, drafts, forward);
  count_replay_rows(forward);
  const std::vector<std::vector<int32_t>> emitted = run(forward, batch, drafts, chained);
  const int64_t tokens = postprocess(batch, forward, emitted, chained);
  record_step(batch, forward, !drafts.empty(), tokens, start);
}

ScheduledBatch Engine::schedule() {
  ScheduledBatch batch = scheduler_.schedule();
  DI_CHECK(!batch.items.empty() || !has_unfinished() || options_.experts != nullptr,
           "the scheduler found nothing to run with unfinished sequences (KV cache too small?)");
  return batch;
}

int64_t Engine::postprocess(const ScheduledBatch& batch, const ForwardBatch& forward,
                            const std::vector<std::vector<int32_t>>& emitted, bool chained) {
  // Per item, its tokens before: decode generated those the scheduler kept (a stop drops the rest).
  std::vector<int64_t> tokens_before;
  for (const ScheduledSequence& item : batch.items) tokens_before.push_back(item.seq->num_tokens());
  scheduler_.postprocess(batch, emitted);
  int64_t tokens = 0;  // prefill: the prompt tokens computed; decode: the tokens generated
  for (size_t i = 0; i < batch.items.size(); ++i) {
    Sequence& seq = *batch.items[i].seq;
    const int64_t kept = std::max<int64_t>(seq.num_tokens() - tokens_before[i], 0);
    tokens += batch.is_prefill ? batch.items[i].num_new : kept;
    if (options_.logits_hashes)  // one fingerprint per token kept
      seq.logits_hashes.insert(seq.logits_hashes.end(), step_hashes_[i].begin(),
                               step_hashes_[i].begin() + std::min<int64_t>(kept, std::ssize(step_hashes_[i])));
  }
  advance_constraints(batch);
  if (model_drafter_ != nullptr && chained) model_drafter_->after_chained_step(batch);
  if (model_drafter_ != nullptr && !chained) model_drafter_->after_step(batch, forward, *cache_);
  if (!has_unfinished()) settle_draft();  // (nothing left to verify it)
  note_device_idle();  // before the verify step's forward and before the draft's
  for (const auto& [seq, block] : scheduler_.take_registered())
    if (store_ != nullptr) store_->save(*seq, block);
  return tokens;
}

void Engine::record_step(const ScheduledBatch& batch, const ForwardBatch& forward, bool verified, int64_t tokens,
                         std::chrono::steady_clock::time_point start) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.num_steps;
  (batch.is_prefill ? stats_.num_prefill_tokens : stats_.num_decode_tokens) += tokens;
  (batch.is_prefill ? stats_.prefill_s : stats_.decode_s) += seconds;
  if (verified) record_verify_time(forward.num_tokens(), seconds * 1e3);
}

void Engine::complete(InFlight& step) {
  if (device_tokens_) {  // the tokens (and fingerprints) of the step's rows, one per item
    std::vector<uint64_t> hashes(options_.logits_hashes ? step.batch.items.size() : 0);
    const std::vector<int32_t> drawn = device_->finish_forward_and_sample(hashes.empty() ? nullptr : hashes.data());
    note_device_idle();
    DI_CHECK(drawn.size() == step.batch.items.size(), "a started step of {} items gave {} tokens",
             step.batch.items.size(), drawn.size());
    step.hashes.assign(step.batch.items.size(), {});
    for (size_t i = 0; i < step.batch.items.size(); ++i) {
      if (!step.batch.items[i].samples) continue;
      step.emitted.push_back({drawn[i]});
      if (!hashes.empty()) step.hashes[i] = {hashes[i]};
    }
  }
  std::vector<int32_t> sampled;
  for (const std::vector<int32_t>& tokens : step.emitted) sampled.push_back(tokens.front());
  const std::vector<bool> kept = scheduler_.completed(step.batch, sampled);
  for (size_t i = 0, s = 0; i < step.batch.items.size(); ++i) {
    if (!step.batch.items[i].samples) continue;
    if (kept[s] && !step.batch.is_prefill) ++stats_.num_decode_tokens;
    if (kept[s] && options_.logits_hashes) step.batch.items[i].seq->logits_hashes.push_back(step.hashes[i].front());
    ++s;
  }
  for (const auto& [seq, block] : scheduler_.take_registered())
    if (store_ != nullptr) store_->save(*seq, block);
}

TokenMasks Engine::token_masks(const ScheduledBatch& batch, const StepDrafts& drafts) const {
  TokenMasks masks;
  StructuredOutput* structured = options_.structured;
  if (structured == nullptr || std::none_of(batch.items.begin(), batch.items.end(), [&](const ScheduledSequence& item) {
        return structured->constrains(*item.seq);
      }))
    return masks;
  masks.words = structured->mask_words();
  // The rows of run_and_sample, in its order: which are masked, and the first row of each item.
  std::vector<size_t> first_row;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const int64_t rows = drafts.empty() ? 1 : 1 + drafts.num_verified[i];
    const bool constrained = structured->constrains(*batch.items[i].seq) && (!drafts.empty() || batch.items[i].samples);
    first_row.push_back(masks.masked.size());
    masks.masked.insert(masks.masked.end(), rows, constrained ? 1 : 0);
  }
  masks.bits.assign(masks.masked.size() * masks.words, 0xffffffffu);
  if (drafts.empty()) {  // one row an item: the constrained ones' masks filled together (across threads)
    std::vector<const Sequence*> seqs;
    std::vector<uint32_t> filled;
    for (size_t i = 0; i < batch.items.size(); ++i)
      if (masks.masked[first_row[i]]) seqs.push_back(batch.items[i].seq);
    filled.resize(seqs.size() * masks.words);
    structured->fill_masks(seqs, filled.data());
    for (size_t i = 0, j = 0; i < batch.items.size(); ++i)
      if (masks.masked[first_row[i]])
        std::copy_n(filled.begin() + j++ * masks.words, masks.words, masks.bits.begin() + first_row[i] * masks.words);
    return masks;
  }
  for (size_t i = 0; i < batch.items.size(); ++i) {  // computed when propose_drafts walked the drafts
    if (!masks.masked[first_row[i]]) continue;
    const int64_t rows = 1 + drafts.num_verified[i];
    DI_CHECK(static_cast<int64_t>(drafts.masks[i].size()) >= rows * masks.words, "masks for {} rows of sequence {}, "
             "{} verified", drafts.masks[i].size() / masks.words, batch.items[i].seq->idx, rows);
    std::copy_n(drafts.masks[i].begin(), rows * masks.words, masks.bits.begin() + first_row[i] * masks.words);
  }
  return masks;
}

void Engine::advance_constraints(const ScheduledBatch& batch) {
  if (options_.structured == nullptr) return;
  for (const ScheduledSequence& item : batch.items) {
    Sequence& seq = *item.seq;
    const StructuredOutput::Progress progress = options_.structured->advance(seq);
    if (progress.satisfied) seq.constraint_satisfied = progress.satisfied;
    if (!progress.dead_end) continue;
    // That request alone ends, on an error; what it generated before the dead end is kept for the record.
    seq.failure = RequestFailure{
        "constraint_dead_end",
        fmt::format("request id {}: its {} constraint reached a state that no token of this vocabulary continues "
                    "after {} output tokens (no token spells what must come next): change the constraint",
                    seq.request->id.dump(), seq.request->constraint->kind_name(), *progress.dead_end)};
    seq.tokens.resize(seq.num_prompt_tokens + *progress.dead_end);
    seq.num_cached = std::min(seq.num_cached, seq.num_tokens());
    seq.num_streamed = std::min(seq.num_streamed, *progress.dead_end);
    seq.logits_hashes.resize(std::min<size_t>(seq.logits_hashes.size(), *progress.dead_end));
    if (seq.status != SequenceStatus::kFinished) scheduler_.end_early(&seq);
  }
}

void Engine::count_replay_rows(const ForwardBatch& forward) {
  if (options_.replay.mode == ReplayOptions::Mode::kOff) return;
  int64_t below = 0, dropped = 0;
  for (const SequenceChunk& seq : forward.sequences) {
    const int64_t rows = std::clamp<int64_t>(seq.replay_floor - seq.num_cached, 0, seq.num_new);
    below += rows;
    dropped += std::min(rows, seq.num_new - 1);  // the compact form keeps each sequence's last row
  }
  stats_.replay_rows_below_floor += below;
  if (forward.compact_replay) {
    const V41TextConfig& v = model_.config().v41;
    stats_.replay_skipped_layer_rows += dropped * (v.num_hidden_layers - v41_first_compact_layer(v));
  }
}

void Engine::run_to_completion() {
  while (has_unfinished()) step();
}

ForwardBatch Engine::build_forward_batch(const ScheduledBatch& batch, const StepDrafts& drafts) const {
  ForwardBatch forward;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const ScheduledSequence& item = batch.items[i];
    const Sequence& seq = *item.seq;
    forward.token_ids.insert(forward.token_ids.end(), seq.tokens.begin() + seq.num_cached,
                             seq.tokens.begin() + seq.num_cached + item.num_new);
    const int64_t num_drafts = drafts.empty() ? 0 : drafts.num_verified[i];
    if (num_drafts > 0) {
      const std::vector<int32_t>& d = drafts.proposals[i].tokens;
      forward.token_ids.insert(forward.token_ids.end(), d.begin(), d.begin() + num_drafts);
    }
    forward.sequences.push_back({seq.num_cached, item.num_new + num_drafts, seq.block_table,
                                 {seq.tokens.data(), static_cast<size_t>(seq.num_cached)}});
    if (batch.is_prefill && options_.replay.mode != ReplayOptions::Mode::kOff)
      forward.sequences.back().replay_floor = std::max<int64_t>(0, seq.num_tokens() - options_.replay.keep_tokens);
    forward.sequences.back().swa_floor = seq.swa_floor;
    forward.sequences.back().keep_inputs_below = seq.keep_inputs_below;
  }
  forward.compact_replay = batch.is_prefill && options_.replay.mode == ReplayOptions::Mode::kCompact;
  forward.speculative_verify = !drafts.empty();
  forward.all_logits = !drafts.empty();  // a verify step samples every row
  return forward;
}

RequestResult Engine::result_of(const Sequence& seq) const {
  RequestResult result;
  result.index = seq.request->index;
  result.id = seq.request->id;
  result.output_token_ids.assign(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
  result.finish_reason = seq.finish_reason;
  result.prompt_tokens = seq.num_prompt_tokens;
  result.constraint_satisfied = seq.constraint_satisfied;
  result.failure = seq.failure;
  if (options_.echo_prompt) result.prompt_token_ids.assign(seq.tokens.begin(), seq.tokens.begin() + seq.num_prompt_tokens);
  result.logits_hashes = seq.logits_hashes;
  return result;
}

std::vector<RequestResult> Engine::results() const {
  std::vector<RequestResult> results;
  for (const auto& seq : sequences_) results.push_back(result_of(*seq));
  return results;
}

std::vector<RequestResult> Engine::take_finished() {
  std::vector<RequestResult> results;
  for (const Sequence* seq : scheduler_.take_finished()) results.push_back(result_of(*seq));
  return results;
}

std::vector<TokenUpdate> Engine::take_new_tokens() {
  std::vector<TokenUpdate> updates;
  for (const auto& seq : sequences_) {
    const int64_t known = seq->num_known_tokens() - seq->num_prompt_tokens;  // (not the placeholders of a step in flight)
    if (known <= seq->num_streamed) continue;
    updates.push_back({seq->request->index, seq->num_streamed,
                       {seq->tokens.begin() + seq->num_prompt_tokens + seq->num_streamed,
                        seq->tokens.begin() + seq->num_known_tokens()}});
    seq->num_streamed = known;
  }
  return updates;
}

std::vector<PrefilledSequence> Engine::take_handoffs() {
  std::vector<PrefilledSequence> handoffs;
  for (Sequence* seq : scheduler_.take_handoffs()) {
    PrefilledSequence out;
    out.request_index = seq->request->index;
    out.tokens = seq->tokens;
    out.logits_hashes = seq->logits_hashes;
    out.kv.resize(cache_->num_layers() * seq->num_cached * cache_->entry_dim());
    cache_->export_entries(seq->block_table, seq->num_cached, out.kv.data());
    blocks_.release(*seq);
    handoffs.push_back(std::move(out));
  }
  return handoffs;
}

bool Engine::add_prefilled(const Request& request, const PrefilledSequence& prefilled) {
  const int64_t expected =
      cache_->num_layers() * (static_cast<int64_t>(prefilled.tokens.size()) - 1) * cache_->entry_dim();
  DI_CHECK(static_cast<int64_t>(prefilled.kv.size()) == expected, "prefilled KV of request {} has {} floats, expected {}",
           request.index, prefilled.kv.size(), expected);
  if (!admit_cached(request, prefilled.tokens, prefilled.kv.data())) return false;
  sequences_.back()->logits_hashes = prefilled.logits_hashes;
  return true;
}

bool Engine::add_cached(const Request& request, std::vector<int32_t> tokens) {
  DI_CHECK(!options_.prefix_cache, "add_cached fabricates KV, which the prefix cache would hand out as real");
  return admit_cached(request, std::move(tokens), nullptr);
}

bool Engine::admit_cached(const Request& request, std::vector<int32_t> tokens, const float* kv) {
  DI_CHECK(!tokens.empty(), "a cached sequence of request {} without tokens", request.index);
  auto seq = std::make_unique<Sequence>();
  seq->idx = static_cast<int64_t>(sequences_.size());
  seq->request = &request;
  seq->tokens = std::move(tokens);
  seq->num_prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
  seq->shares_blocks = shares_blocks(seq->num_prompt_tokens);  // its KV came from a prefill under the same options
  seq->num_cached = seq->num_tokens() - 1;
  if (!blocks_.can_grow(*seq, seq->num_tokens())) return false;
  blocks_.grow(*seq, seq->num_tokens());
  if (kv != nullptr) cache_->import_entries(seq->block_table, seq->num_cached, kv);
  if (options_.structured != nullptr) options_.structured->start(*seq);  // over the tokens it brings
  scheduler_.add_running(seq.get());
  sequences_.push_back(std::move(seq));
  return true;
}

}  // namespace deepinfer
