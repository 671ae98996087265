#include "src/bench/step_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "src/bench/deepseek_floor.h"
#include "src/bench/v41_floor.h"
#include "src/core/check.h"
#include "src/core/random.h"
#include "src/engine/engine.h"

namespace deepinfer {

int64_t compact_keep_tokens(const ReplayOptions& replay) {
  return replay.mode == ReplayOptions::Mode::kCompact ? replay.keep_tokens : 0;
}

namespace {

struct Timing {
  double median_ms, p90_ms, min_ms;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)], ms.front()};
}

// The host time of each timed step, and the device's idle time in it where the backend measures it (before its
// forward, and before its draft with a model drafter).
struct StepSamples {
  std::vector<double> ms, idle_ms;
  int64_t graph_steps = 0;
};

// warmup + steps engine steps; the first `warmup` are not kept.
StepSamples run_steps(const CausalLm& model, Engine& engine, int64_t warmup, int64_t steps) {
  StepSamples samples;
  const DeviceSteps* device = model.device_steps();  // (null on the CPU: no graphs, idle time not measured)
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const int64_t replays = device != nullptr ? device->graph_replays() : 0;
    const DeviceIdle idle_before = device != nullptr ? device->device_idle() : DeviceIdle{};
    const auto start = std::chrono::steady_clock::now();
    engine.step();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (s < warmup) continue;
    samples.ms.push_back(ms);
    if (device == nullptr) continue;
    samples.graph_steps += device->graph_replays() > replays ? 1 : 0;
    const DeviceIdle idle = device->device_idle();
    if (idle.gaps > idle_before.gaps) samples.idle_ms.push_back(idle.ms - idle_before.ms);
  }
  return samples;
}

// A greedy request that no EOS ends.
Request bench_request(int64_t index, std::vector<int32_t> prompt, int64_t max_new_tokens) {
  Request r;
  r.index = index;
  r.id = index;
  r.prompt_token_ids = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

int32_t token_at(const ModelConfig& c, uint64_t i) {
  return static_cast<int32_t>(2 + splitmix64(i) % static_cast<uint64_t>(c.vocab_size - 2));
}

StepBenchResult make_result(const char* phase, int64_t batch, int64_t context, int64_t tokens_per_step,
                            StepSamples samples, int64_t steps) {
  const Timing timing = summarize(std::move(samples.ms));
  StepBenchResult r;
  r.phase = phase;
  r.batch = batch;
  r.context = context;
  r.tokens_per_step = tokens_per_step;
  r.median_ms = timing.median_ms;
  r.p90_ms = timing.p90_ms;
  r.min_ms = timing.min_ms;
  r.tokens_per_s = tokens_per_step / (timing.median_ms / 1e3);
  r.steps = steps;
  if (!samples.idle_ms.empty()) r.device_idle_ms = summarize(std::move(samples.idle_ms)).median_ms;
  r.graph_steps = samples.graph_steps;
  return r;
}

ExpertWork prefill_expert_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ReplayOptions& replay) {
  const int64_t keep = compact_keep_tokens(replay);
  const ExpertWork full = uniform_expert_work(c, prompts * prompt_len);
  if (keep == 0) return full;
  // Per MoE layer, averaged: the layers from the compact one route only the kept rows.
  const ExpertWork kept = uniform_expert_work(c, prompts * std::clamp<int64_t>(keep, 1, prompt_len));
  const double L = static_cast<double>(c.v41.num_hidden_layers);
  const double kept_layers = L - static_cast<double>(v41_first_compact_layer(c.v41));
  return {(full.experts_touched * (L - kept_layers) + kept.experts_touched * kept_layers) / L,
          (full.pairs * (L - kept_layers) + kept.pairs * kept_layers) / L};
}

}  // namespace

StepWork decode_floor_work(const ModelConfig& c, int64_t rows, int64_t context, const ExpertWork& experts) {
  return is_v41(c) ? v41_decode_work(c, rows, context, experts) : deepseek_decode_work(c, rows, context, experts);
}

StepWork prefill_floor_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ExpertWork& experts,
                            const ReplayOptions& replay) {
  return is_v41(c) ? v41_prefill_work(c, prompts, prompt_len, experts, compact_keep_tokens(replay))
                   : deepseek_prefill_work(c, prompts, prompt_len, experts);
}

void set_floor(StepBenchResult& r, const StepWork& work) {
  r.floor_ms = work.floor_ms();
  r.floor_bytes_ms = work.bytes_ms();
  r.floor_flops_ms = work.flops_ms();
  r.floor_over_measured = r.floor_ms / r.median_ms;
}

StepBenchResult bench_decode(const CausalLm& model, int64_t batch, int64_t context, int64_t warmup, int64_t steps,
                             ExpertDispatcher* experts, const DecodeSpeculation& spec) {
  const ModelConfig& c = model.config();
  // The variable-length rule measures its cost curve first: three steps at each verify length 0..num_drafts.
  const int64_t cost_warmup = spec.variable_length ? 3 * (spec.num_drafts + 1) : 0;
  // A sequence emits up to 1 + num_drafts tokens a step and must not reach its length limit while timed.
  const int64_t new_tokens = (cost_warmup + warmup + steps + 2) * (1 + spec.num_drafts);
  const int64_t max_len = context + new_tokens;
  DI_INPUT_CHECK(max_len <= c.max_position_embeddings, "decode context {} + {} new tokens exceeds the model's {} positions",
                 context, new_tokens, c.max_position_embeddings);
  const int64_t blocks_per_seq = (max_len + KvCache::kBlockSize - 1) / KvCache::kBlockSize;
  EngineOptions options;
  options.kv_cache_tokens = batch * blocks_per_seq * KvCache::kBlockSize;
  options.limits.max_running = batch;
  options.limits.chunk_tokens = batch;  // one token a sequence a step
  options.experts = experts;
  options.overlap_schedule = spec.overlap_schedule;
  std::optional<ControlledDrafter> drafter;
  if (spec.num_drafts > 0) {
    if (!spec.model_drafter) drafter.emplace(spec.drafter, c.vocab_size);
    options.speculation = {spec.num_drafts, spec.variable_length, drafter ? &*drafter : nullptr, cost_warmup,
                           spec.row_quantum, spec.model_drafter};
  }
  std::vector<Request> requests;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt(context);
    for (int64_t t = 0; t < context; ++t) prompt[t] = token_at(c, static_cast<uint64_t>(b * max_len + t));
    requests.push_back(bench_request(b, std::move(prompt), new_tokens));
  }
  Engine engine(model, options);
  engine.fill_cache_random(7);
  for (const Request& r : requests) {
    std::vector<int32_t> tokens = r.prompt_token_ids;
    tokens.push_back(token_at(c, static_cast<uint64_t>(r.index * max_len + context)));
    DI_CHECK(engine.add_cached(r, std::move(tokens)), "the decode benchmark's cache holds {} sequences", batch);
  }
  run_steps(model, engine, cost_warmup + warmup, 0);
  const EngineStats before = engine.stats();
  StepSamples samples = run_steps(model, engine, 0, steps);
  const EngineStats& after = engine.stats();
  double total_ms = 0;
  for (double ms : samples.ms) total_ms += ms;
  const auto emitted = static_cast<double>(after.num_decode_tokens - before.num_decode_tokens);
  // Speculative steps are floored as decode steps of their rows (each verified draft a row of the same context).
  const SpeculationStats& sa = after.speculation;
  const SpeculationStats& sb = before.speculation;
  const double pairs = static_cast<double>(sa.sequence_steps - sb.sequence_steps);
  const int64_t rows = spec.num_drafts > 0
                           ? std::llround(static_cast<double>(batch) + (sa.verified - sb.verified) / std::max(1.0, static_cast<double>(steps)))
                           : batch;
  StepBenchResult r = make_result("decode", batch, context, batch, std::move(samples), steps);
  set_floor(r, decode_floor_work(c, rows, context, uniform_expert_work(c, rows)));
  if (spec.num_drafts > 0) {
    r.tokens_per_step = std::llround(emitted / steps);
    r.tokens_per_s = emitted / (total_ms / 1e3);
    SpeculationPoint& p = r.spec;
    p.num_drafts = spec.num_drafts;
    p.variable_length = spec.variable_length;
    p.row_quantum = spec.row_quantum;
    p.mean_drafted = (sa.drafted - sb.drafted) / pairs;
    p.mean_verified = (sa.verified - sb.verified) / pairs;
    p.mean_accepted = (sa.accepted - sb.accepted) / pairs;
    p.rows_per_step = static_cast<double>(batch) + (sa.verified - sb.verified) / static_cast<double>(steps);
    p.tokens_per_step = emitted / steps;
    p.calibration_error = sa.calibration_error();
    if (!spec.model_drafter) {
      p.mean_acceptance = spec.drafter.mean_acceptance;
      p.spread = spec.drafter.spread;
    }
  }
  return r;
}

StepBenchResult bench_prefill(const CausalLm& model, int64_t chunk, int64_t prompt_len, int64_t warmup, int64_t steps,
                              ExpertDispatcher* experts, const ReplayOptions& replay) {
  const ModelConfig& c = model.config();
  DI_INPUT_CHECK(chunk % prompt_len == 0, "--chunk-tokens {} is not a multiple of --prompt-len {}", chunk, prompt_len);
  const int64_t prompts = chunk / prompt_len;
  // Each prompt's blocks, and one more for its first token; freed when it finishes there.
  const int64_t blocks_per_seq = (prompt_len + 1 + KvCache::kBlockSize - 1) / KvCache::kBlockSize;
  EngineOptions options;
  options.kv_cache_tokens = prompts * blocks_per_seq * KvCache::kBlockSize;
  options.limits.max_running = prompts;
  options.limits.chunk_tokens = chunk;
  options.experts = experts;
  options.replay = replay;
  std::vector<Request> requests;
  for (int64_t i = 0; i < (warmup + steps) * prompts; ++i) {
    std::vector<int32_t> prompt(prompt_len);
    for (int64_t t = 0; t < prompt_len; ++t) prompt[t] = token_at(c, static_cast<uint64_t>(i * prompt_len + t));
    requests.push_back(bench_request(i, std::move(prompt), 1));
  }
  Engine engine(model, options);
  for (const Request& r : requests) engine.add_request(r);
  StepSamples samples = run_steps(model, engine, warmup, steps);
  StepBenchResult r = make_result("prefill", prompts, prompt_len, chunk, std::move(samples), steps);
  r.replay = replay;
  set_floor(r, prefill_floor_work(c, prompts, prompt_len, prefill_expert_work(c, prompts, prompt_len, replay), replay));
  return r;
}

}  // namespace deepinfer
