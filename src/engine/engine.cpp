#include "src/engine/engine.h"

#include <chrono>

#include "src/engine/sampler.h"

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

Engine::Engine(const DeepseekModel& model, EngineOptions options)
    : model_(model),
      options_(options),
      cache_(model.make_kv_cache((options.kv_cache_tokens + MlaKvCache::kBlockSize - 1) / MlaKvCache::kBlockSize)),
      blocks_(cache_.num_blocks(), MlaKvCache::kBlockSize),
      scheduler_(with_model_len(options.limits, model.config()), blocks_, eos_ids(model.config())) {
  options_.limits = with_model_len(options.limits, model.config());
}

void Engine::validate(const Request& request) const {
  const ModelConfig& c = model_.config();
  const std::string who = fmt::format("request id {}", request.id.dump());
  const auto prompt_len = static_cast<int64_t>(request.prompt_token_ids.size());
  DI_INPUT_CHECK(prompt_len > 0, "{}: empty prompt_token_ids", who);
  DI_INPUT_CHECK(prompt_len < options_.limits.max_model_len,
                 "{}: prompt of {} tokens leaves no room to generate: it must stay below the model's maximum of {} positions (prompts that reach it exceed the maximum)",
                 who, prompt_len, options_.limits.max_model_len);
  for (int32_t token : request.prompt_token_ids)
    DI_INPUT_CHECK(token >= 0 && token < c.vocab_size, "{}: token id {} is outside the vocabulary [0, {})", who,
                   token, c.vocab_size);
  const int64_t longest = std::min(prompt_len + request.max_new_tokens, options_.limits.max_model_len);
  DI_INPUT_CHECK(blocks_.blocks_for(longest) <= blocks_.num_blocks(),
                 "{}: needs {} tokens of KV cache, more than the {} the cache holds (raise --kv-cache-tokens)", who,
                 longest, blocks_.num_blocks() * MlaKvCache::kBlockSize);
}

void Engine::add_request(const Request& request) {
  validate(request);
  auto seq = std::make_unique<Sequence>();
  seq->idx = static_cast<int64_t>(sequences_.size());
  seq->request = &request;
  seq->tokens = request.prompt_token_ids;
  seq->num_prompt_tokens = seq->num_tokens();
  scheduler_.add(seq.get());
  sequences_.push_back(std::move(seq));
}

void Engine::step() {
  const auto start = std::chrono::steady_clock::now();
  const ScheduledBatch batch = scheduler_.schedule();
  DI_CHECK(!batch.items.empty(), "the scheduler found nothing to run with {} unfinished sequences",
           has_unfinished() ? "some" : "no");
  const Tensor logits = model_.forward(build_forward_batch(batch), cache_);
  scheduler_.postprocess(batch, sample(batch, logits));

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.num_steps;
  int64_t tokens = 0;
  for (const ScheduledSequence& item : batch.items) tokens += item.num_new;
  (batch.is_prefill ? stats_.num_prefill_tokens : stats_.num_decode_tokens) += tokens;
  (batch.is_prefill ? stats_.prefill_s : stats_.decode_s) += seconds;
}

void Engine::run_to_completion() {
  while (has_unfinished()) step();
}

ForwardBatch Engine::build_forward_batch(const ScheduledBatch& batch) const {
  ForwardBatch forward;
  for (const ScheduledSequence& item : batch.items) {
    const Sequence& seq = *item.seq;
    forward.token_ids.insert(forward.token_ids.end(), seq.tokens.begin() + seq.num_cached,
                             seq.tokens.begin() + seq.num_cached + item.num_new);
    forward.sequences.push_back({seq.num_cached, item.num_new, seq.block_table});
  }
  return forward;
}

std::vector<int32_t> Engine::sample(const ScheduledBatch& batch, const Tensor& logits) {
  std::vector<int32_t> tokens;
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const ScheduledSequence& item = batch.items[i];
    if (!item.samples) continue;
    // The sampled token lands at position num_tokens(): that indexes the request's random stream.
    tokens.push_back(sample_token(logits.data<float>() + static_cast<int64_t>(i) * vocab, vocab,
                                  item.seq->request->sampling, item.seq->num_tokens(), sampler_scratch_));
  }
  return tokens;
}

std::vector<RequestResult> Engine::results() const {
  std::vector<RequestResult> results;
  for (const auto& seq : sequences_) {
    RequestResult result;
    result.id = seq->request->id;
    result.output_token_ids.assign(seq->tokens.begin() + seq->num_prompt_tokens, seq->tokens.end());
    result.finish_reason = seq->finish_reason;
    result.prompt_tokens = seq->num_prompt_tokens;
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace deepinfer
