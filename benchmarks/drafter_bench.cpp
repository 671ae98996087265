// The GPU drafters' cost at a released shape (issue #27), on dummy weights with the draft module generated
// (WeightOrigin::dummy_draft_module):
//   drafter_bench dspark configs/models/deepseek-v4.1-flash.json [--layers 4] [--context 4096] [--batches 16,60,96]
//                 [--varlen 1]
//   drafter_bench mtp configs/models/deepseek-v3.json [--layers 4] ...
// The main model runs at --layers (V4.1: the drafter's target layers renumbered to its last three, since the fusion
// reads three), every sequence at --context cached tokens (random cache entries). Per batch of S sequences it
// prints one JSON line: the main decode step's median ms without the drafter and with it enabled (DSpark: the step
// also writes the draft layers' keys), and the drafter's own median ms (DSpark: one block of its block_size drafts a
// sequence; MTP: the module over the step's S rows). Medians of 9 after 3 warm-up runs, host wall clock around the
// model's calls (each returns its tokens to the host, so the device's work is in it). Then the engine's speculative
// decode loop with the drafter (fixed drafts: a DSpark block's, MTP's one; greedy; in order):
// the median engine step (verify step, postprocessing, the next draft) and the device's idle time in it (before the
// verify step's forward and before the draft: the host's work showing through), over 9 steps after 3; then with
// overlapped scheduling (chained_*: each draft queued behind its verify step, the host preparing the next step while
// the device drafts). --varlen 1: the engine loop under the variable-length rule (its cost curve measured first;
// chained, each step laid out once its draft is back). The dummy drafts are almost never accepted, so a step emits
// about one token a sequence: this times the loop, not its yield.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/host_timing.h"
#include "benchmarks/microbench.h"
#include "src/core/files.h"
#include "src/bench/step_bench.h"
#include "src/model/backend.h"
#include "src/model/engram_hash.h"
#include "src/model/model_config.h"
#include "src/model/v41/v41_config.h"

using namespace deepinfer;

namespace {

ModelConfig config_at(const std::string& path, const std::string& drafter, int64_t layers) {
  nlohmann::json root = nlohmann::json::parse(read_text_file(path, "model config"));
  if (drafter == "dspark") {
    root = v41_at_depth(std::move(root), layers, path);
    std::vector<int64_t> targets;
    for (int64_t l = std::max<int64_t>(0, layers - 3); l < layers; ++l) targets.push_back(l);
    root["text_config"]["dspark_target_layer_ids"] = targets;
  } else {
    root["num_hidden_layers"] = layers;
  }
  ModelConfig config = parse_model_config(root.dump(), path + " (drafter_bench)");
  if (!config.v41.engram_layer_ids.empty()) dummy_engram_hash(config.v41);  // (kept at --layers 7 and more)
  return config;
}

// One model, its cache filled at random and S sequences at `context`: the decode step's and the drafter's medians.
struct Timing {
  double step_ms = 0, draft_ms = 0;
};
Timing time_model(const ModelConfig& config, const std::string& drafter, bool enable, int64_t batch, int64_t context) {
  WeightOrigin weights;
  weights.dummy_seed = 7;
  weights.dummy_draft_module = true;
  std::unique_ptr<CausalLm> model = make_causal_lm(config, std::move(weights), Device::kCuda, 0);
  if (enable) require_draft_module(*model).enable();
  const int64_t blocks_per_seq = (context + 1 + KvCache::kBlockSize - 1) / KvCache::kBlockSize + 1;
  std::unique_ptr<KvCache> cache = model->make_kv_cache(batch * blocks_per_seq);
  cache->fill_random(11);
  std::vector<std::vector<int32_t>> tables(batch);
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
  // The tokens before each sequence's row (engram layers hash the last few), as arbitrary as the cache's entries.
  std::vector<std::vector<int32_t>> earlier(batch, std::vector<int32_t>(context));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < context; ++i)
      earlier[s][i] = static_cast<int32_t>((i * 31 + s * 7 + 3) % config.vocab_size);
  ForwardBatch step;
  std::vector<SamplingRow> rows;
  for (int64_t s = 0; s < batch; ++s) {
    step.token_ids.push_back(static_cast<int32_t>(1000 + 7 * s));
    step.sequences.push_back({context, 1, tables[s], earlier[s]});
    rows.push_back({0.0f, 1.0f, 0, 5, context + 1});
  }
  Timing t;
  // The same step again and again (its rows rewritten in place): what a decode step of S sequences costs.
  const DeviceSteps& device = *model->device_steps();
  t.step_ms = host_median_ms(9, [&] { device.forward_and_sample(step, *cache, nullptr, rows, nullptr, nullptr); });
  if (!enable) return t;
  const DraftModule& module = *model->draft_module();
  if (drafter == "dspark") {
    t.draft_ms = host_median_ms(9, [&] { module.dspark_draft(step, *cache, rows); });
  } else {
    std::vector<int64_t> hidden_rows(batch);
    for (int64_t s = 0; s < batch; ++s) hidden_rows[s] = s;
    t.draft_ms = host_median_ms(9, [&] {
      device.forward_and_sample(step, *cache, nullptr, rows, nullptr, nullptr);  // keeps the hidden states
      module.mtp_draft(step, hidden_rows, *cache);
    }) - t.step_ms;
  }
  return t;
}

// The engine's speculative loop (bench_decode with the model's drafter): each sequence at `context`, `drafts` drafts
// verified a step; in order, or (overlap) each DSpark draft chained behind its verify step.
struct EngineTiming {
  double step_ms = 0, idle_ms = 0, tokens_per_step = 0;
};
EngineTiming time_engine(const ModelConfig& config, int64_t drafts, int64_t batch, int64_t context, bool overlap,
                         bool varlen) {
  WeightOrigin weights;
  weights.dummy_seed = 7;
  weights.dummy_draft_module = true;
  std::unique_ptr<CausalLm> model = make_causal_lm(config, std::move(weights), Device::kCuda, 0);
  require_draft_module(*model).enable();
  DecodeSpeculation spec;
  spec.num_drafts = drafts;
  spec.model_drafter = true;
  spec.overlap_schedule = overlap;
  spec.variable_length = varlen;
  const StepBenchResult r = bench_decode(*model, batch, context, /*warmup=*/3, /*steps=*/9, nullptr, spec);
  return {r.median_ms, r.device_idle_ms, r.spec.tokens_per_step};
}

int run(int argc, char** argv) {
  if (argc < 3 || (std::strcmp(argv[1], "dspark") != 0 && std::strcmp(argv[1], "mtp") != 0)) {
    std::fprintf(stderr, "usage: drafter_bench dspark|mtp CONFIG [--layers N] [--context C] [--batches 16,60,96] "
                 "[--varlen 1]\n");
    return 2;
  }
  const std::string drafter = argv[1], path = argv[2];
  int64_t layers = 4, context = 4096;
  bool varlen = false;
  std::vector<int64_t> batches = {16, 60, 96};
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--layers") layers = std::stoll(value);
    else if (key == "--context") context = std::stoll(value);
    else if (key == "--varlen") varlen = value == "1";
    else if (key == "--batches") {
      batches.clear();
      for (size_t at = 0; at < value.size();) {
        const size_t comma = value.find(',', at);
        batches.push_back(std::stoll(value.substr(at, comma - at)));
        at = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "drafter_bench: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  const ModelConfig config = config_at(path, drafter, layers);
  for (const int64_t batch : batches) {
    const Timing without = time_model(config, drafter, false, batch, context);
    const Timing with = time_model(config, drafter, true, batch, context);
    const int64_t drafts = drafter == "dspark" ? config.v41.dspark.block_size : 1;
    const EngineTiming loop = time_engine(config, drafts, batch, context, false, varlen);
    nlohmann::json line = {{"drafter", drafter},       {"config", path},          {"layers", layers},
                           {"context", context},       {"sequences", batch},      {"step_ms", without.step_ms},
                           {"step_ms_drafter_enabled", with.step_ms}, {"draft_ms", with.draft_ms},
                           {"engine_drafts", drafts},  {"engine_varlen", varlen}, {"engine_step_ms", loop.step_ms},
                           {"engine_device_idle_ms", loop.idle_ms},   {"engine_tokens_per_step", loop.tokens_per_step}};
    if (drafter == "dspark") line["block"] = config.v41.dspark.block_size;
    const EngineTiming chained = time_engine(config, drafts, batch, context, true, varlen);
    line["chained_step_ms"] = chained.step_ms;
    line["chained_device_idle_ms"] = chained.idle_ms;
    line["chained_tokens_per_step"] = chained.tokens_per_step;
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("drafter_bench", run, argc, argv); }
