#include "src/bench/step_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "src/bench/roofline.h"
#include "src/core/check.h"
#include "src/core/random.h"

namespace deepinfer {

namespace {

struct Timing {
  double median_ms, p90_ms, min_ms;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)], ms.front()};
}

// One step as the engine runs it: greedy tokens drawn where the logits are, when the backend can.
void run_step(const CausalLm& model, const ForwardBatch& fb, KvCache& cache, ExpertExecutor* experts) {
  if (model.samples_on_device()) {
    model.forward_and_sample(fb, cache, experts, std::vector<SamplingRow>(fb.sequences.size()));
  } else {
    model.forward(fb, cache, experts);
  }
}

// The host time of each timed step, and the device's idle time before it where the backend measures it.
struct StepSamples {
  std::vector<double> ms, idle_ms;
};

// warmup + steps steps, step s running make_batch(s); the first `warmup` are not kept.
StepSamples run_steps(const CausalLm& model, KvCache& cache, ExpertExecutor* experts, int64_t warmup, int64_t steps,
                      const std::function<ForwardBatch(int64_t)>& make_batch) {
  StepSamples samples;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const ForwardBatch fb = make_batch(s);
    const auto start = std::chrono::steady_clock::now();
    run_step(model, fb, cache, experts);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (s < warmup) continue;
    samples.ms.push_back(ms);
    const double idle_ms = model.device_idle_before_last_step_ms();
    if (idle_ms >= 0) samples.idle_ms.push_back(idle_ms);
  }
  return samples;
}

int32_t token_at(const ModelConfig& c, uint64_t i) {
  return static_cast<int32_t>(2 + splitmix64(i) % static_cast<uint64_t>(c.vocab_size - 2));
}

StepBenchResult make_result(const char* phase, int64_t batch, int64_t context, int64_t tokens_per_step,
                            StepSamples samples, double floor_ms, int64_t steps) {
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
  r.floor_ms = floor_ms;
  r.floor_over_measured = floor_ms / timing.median_ms;
  r.steps = steps;
  if (!samples.idle_ms.empty()) r.device_idle_ms = summarize(std::move(samples.idle_ms)).median_ms;
  return r;
}

// Sequence s owns cache blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq).
std::vector<std::vector<int32_t>> contiguous_block_tables(int64_t sequences, int64_t blocks_per_seq) {
  std::vector<std::vector<int32_t>> tables(sequences, std::vector<int32_t>(blocks_per_seq));
  for (int64_t s = 0; s < sequences; ++s)
    for (int64_t i = 0; i < blocks_per_seq; ++i) tables[s][i] = static_cast<int32_t>(s * blocks_per_seq + i);
  return tables;
}

}  // namespace

StepBenchResult bench_decode(const CausalLm& model, int64_t batch, int64_t context, int64_t warmup, int64_t steps,
                             ExpertExecutor* experts) {
  const ModelConfig& c = model.config();
  const int64_t max_len = context + warmup + steps;
  DI_INPUT_CHECK(max_len <= c.max_position_embeddings, "decode context {} + {} steps exceeds the model's {} positions",
                 context, warmup + steps, c.max_position_embeddings);
  const int64_t blocks_per_seq = (max_len + KvCache::kBlockSize - 1) / KvCache::kBlockSize;
  std::unique_ptr<KvCache> cache = model.make_kv_cache(batch * blocks_per_seq);
  cache->fill_random(7);
  const std::vector<std::vector<int32_t>> tables = contiguous_block_tables(batch, blocks_per_seq);
  StepSamples samples = run_steps(model, *cache, experts, warmup, steps, [&](int64_t s) {
    ForwardBatch fb;
    for (int64_t b = 0; b < batch; ++b) {
      fb.token_ids.push_back(token_at(c, static_cast<uint64_t>(s * batch + b)));
      fb.sequences.push_back({context + s, 1, tables[b]});
    }
    return fb;
  });
  return make_result("decode", batch, context, batch, std::move(samples),
                     decode_floor_bytes(c, batch, context) / kH200CopyBytesPerS * 1e3, steps);
}

StepBenchResult bench_prefill(const CausalLm& model, int64_t chunk, int64_t prompt_len, int64_t warmup, int64_t steps,
                              ExpertExecutor* experts) {
  const ModelConfig& c = model.config();
  DI_INPUT_CHECK(chunk % prompt_len == 0, "--chunk {} is not a multiple of --prompt-len {}", chunk, prompt_len);
  const int64_t prompts = chunk / prompt_len;
  const int64_t blocks_per_seq = (prompt_len + KvCache::kBlockSize - 1) / KvCache::kBlockSize;
  std::unique_ptr<KvCache> cache = model.make_kv_cache(prompts * blocks_per_seq);
  const std::vector<std::vector<int32_t>> tables = contiguous_block_tables(prompts, blocks_per_seq);
  StepSamples samples = run_steps(model, *cache, experts, warmup, steps, [&](int64_t s) {
    ForwardBatch fb;
    for (int64_t p = 0; p < prompts; ++p) {
      for (int64_t t = 0; t < prompt_len; ++t)
        fb.token_ids.push_back(token_at(c, static_cast<uint64_t>((s * prompts + p) * prompt_len + t)));
      fb.sequences.push_back({0, prompt_len, tables[p]});
    }
    return fb;
  });
  return make_result("prefill", prompts, prompt_len, chunk, std::move(samples),
                     prefill_floor_flops(c, prompts, prompt_len) / kH200Bf16FlopsPerS * 1e3, steps);
}

}  // namespace deepinfer
