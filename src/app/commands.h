// The subcommands. main.cpp parses argv into these option structs; each run_* returns the process exit code
// (the same on every rank).
#pragma once

#include "src/bench/step_bench.h"
#include "src/bench/sweep.h"
#include "src/comm/world.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace deepinfer::app {

struct InfoOptions {
  std::string deploy_path;
};
int run_info(const InfoOptions& options, const World& world);

// deepinfer memory (cmd_memory.cpp): what one rank of each role holds of a model, from config.json.
struct MemoryOptions {
  std::string deploy_path;
  std::string model_path;      // a model directory or its config.json
  double gpu_memory_gib = 140.4;  // an H200's 143,771 MiB (nvidia-smi)
  bool no_draft_module = false;   // leave out V3's MTP layer, V4.1's DSpark layers (a checkpoint without them)
  std::string engram_tables = "device";  // V4.1, as generate's options
  std::string engram_split = "group";
  bool no_engram = false;
};
int run_memory(const MemoryOptions& options, const World& world);

// Where a model comes from: a checkpoint directory (config.json + safetensors) or a bare config .json with
// --load-format dummy.
struct ModelOptions {
  std::string model_path;
  std::string load_format = "auto";
  uint64_t seed = 0;  // dummy weights
  std::string device = "auto";  // cpu | cuda | auto
  bool no_engram = false;  // DeepSeek-V4.1: run without its engram layers (their tables need not be there)
  std::string engram_tables = "device";  // DeepSeek-V4.1 on CUDA: device | host (pinned, gathered per step)
  std::string engram_split = "group";    // DeepSeek-V4.1 under --deploy: group (rows split across the EP group) | none
  int64_t num_layers = 0;  // > 0: run the model at this depth (v41_at_depth for V4.1; the first layers otherwise)
  bool no_cuda_graphs = false;  // CUDA: every decode step eager (for A/B measurements and debugging)
  bool batch_invariant = false;  // ModelConfig::batch_invariant (issue #28)
};

struct ForwardOptions {
  ModelOptions model;
  std::string tokens;  // "1,2,3"
  std::string output_path;
};
int run_forward(const ForwardOptions& options, const World& world);

// Speculative decoding (engine/speculation.h) with the controlled drafter (engine/controlled_drafter.h).
struct SpeculationCliOptions {
  int64_t num_drafts = 0;       // --nextn (0: off)
  bool variable_length = false; // --spec-varlen
  int64_t row_quantum = 1;      // --spec-row-quantum
  std::string drafter = "controlled";  // generate: --draft controlled | mtp
  std::string reference_path;   // generate: --draft-reference (results of a run without speculation)
  double mean_acceptance = 0.8; // --draft-acceptance
  double spread = 1.0;          // --draft-spread
  uint64_t seed = 0;            // --draft-seed
  // The checks generate and bench share: --spec-varlen (and, in generate, --draft-reference) need --nextn, and
  // --batch-invariant refuses --spec-varlen (its verify lengths depend on the batch). InputError naming the options.
  void check(bool batch_invariant) const;
  bool model_drafter() const { return num_drafts > 0 && drafter != "controlled"; }
  // The controlled drafter's options (--draft-acceptance, --draft-spread, --draft-seed).
  ControlledDraftOptions controlled() const { return {mean_acceptance, spread, seed}; }
  // The engine's speculation: these options with `controlled_drafter` (null with the model's own drafter).
  SpeculationOptions engine_options(Drafter* controlled_drafter) const;
  // The decode benchmark's speculation (the controlled drafter, acceptance drawn).
  DecodeSpeculation decode_bench() const;
};

struct GenerateOptions {
  ModelOptions model;
  std::string input_path;
  std::string output_path;
  int64_t kv_cache_tokens = 16384;
  int64_t max_running = 256;
  int64_t chunk_tokens = 4096;
  bool prefix_cache = false;
  bool logits_hashes = false;  // results carry each output token's logits-row fingerprint (EngineOptions)
  bool echo_prompt = false;    // results carry the prompt's ids (and text, with a tokenizer) as the model saw them
  bool overlap_schedule = true;  // EngineOptions::overlap_schedule (--no-overlap-schedule: in order)
  std::string kv_store_dir;  // the prefix cache's directory tier (implies prefix_cache)
  int64_t swa_replay_tokens = 128;  // GenerationOptions::swa_replay_tokens
  std::string yoco_truncation = "off";  // V4.1's bounded decoder replay: off | mask | compact (replay_options.h)
  int64_t yoco_keep_tokens = 0;
  double gpu_memory_fraction = 0.0;  // > 0: size the KV cache from GPU memory instead of kv_cache_tokens
  std::string deploy_path;       // empty: one rank does everything
  std::string expert_plan_path;  // optional placement plan (phy2log per MoE layer)
  std::string tokenizer_path;    // tokenizer.json: "prompt" text in, "text" out (default: the model directory's)
  // Structured output (GrammarLimits): one compile's limit, the input's compiles together, the compiled grammars kept.
  double grammar_timeout_s = 30.0;
  double grammar_total_s = 600.0;
  int64_t grammar_cache_mb = 1024;
  std::string chat_prose_path;   // chat requests: launch/chat_prose.py's file (default: beside the tokenizer)
  std::string served_model_name;  // what a request's "model" may name (default: the model directory's name)
  std::string stream_path;       // --stream: events as tokens arrive (jsonl.h StreamWriter); "-" standard output
  // The output (generate_job.h): results appended as they finish, unless ordered_output (whole, in input order, at
  // the end: for small jobs, and inputs with "continues").
  bool ordered_output = false;
  bool resume = false;
  std::string bad_requests = "refuse";  // refuse | record
  double sync_interval_s = 5.0;
  double progress_interval_s = 30.0;
  std::string status_file;
  double drain_timeout_s = 60.0;
  int64_t window = 0;  // requests a window; 0: 8 x the deployment's running capacity, within [256, 32768]
  int64_t eplb_interval = -1;      // -1: the deployment's value
  int64_t redundant_experts = -1;  // -1: the deployment's value
  SpeculationCliOptions speculation;
};
int run_generate(const GenerateOptions& options, const World& world);

struct BenchOptions {
  ModelOptions model;
  std::string phase;             // "decode" or "prefill"
  std::vector<int64_t> batches = {1, 8, 64, 256};       // decode
  std::vector<int64_t> contexts = {1024, 4096};         // decode
  std::vector<int64_t> chunks = {4096, 16384, 65536};   // prefill
  int64_t prompt_len = 1024;                            // prefill
  int64_t warmup = 3;
  int64_t steps = 10;
  std::string output_path;       // optional JSON lines, one per point
  // --rank-slice: run what world rank `slice_rank` of this deployment runs, alone (moe/rank_slice_dispatcher.h),
  // under the drawn routing (required there).
  std::string rank_slice_deploy;
  // kNoSliceRank when --slice-rank is not given, so that a given negative rank is told about the range.
  static constexpr int kNoSliceRank = std::numeric_limits<int>::min();
  int slice_rank = kNoSliceRank;
  std::string expert_plan_path;
  std::string routing;
  uint64_t routing_seed = 0;
  std::string yoco_truncation = "off";  // prefill: V4.1's bounded decoder replay (replay_options.h)
  int64_t yoco_keep_tokens = 0;
  SpeculationCliOptions speculation;  // decode
};
int run_bench(const BenchOptions& options, const World& world);

struct DispatchBenchCliOptions {
  std::vector<int64_t> tokens = {128, 4096};
  std::vector<int64_t> hiddens = {2048, 7168};
  std::vector<int64_t> top_ks = {6, 8};
  int64_t warmup = 5;
  int64_t iters = 20;
  std::string output_path;
};
// `bench dispatch`: the expert-parallel exchange alone, every rank of the world one EP rank on its own GPU.
int run_bench_dispatch(const DispatchBenchCliOptions& options, const World& world);

struct SweepCliOptions {
  ModelOptions model;
  std::string deploy_path;
  std::string expert_plan_path;
  std::string routing;  // empty: the router's; "uniform" or "zipf:S" (moe/synthetic_routing.h)
  uint64_t routing_seed = 0;
  SweepOptions run;  // the sweep itself (phase, points, lengths, steps, speculation), as bench/sweep.h takes it
};
int run_sweep(const SweepCliOptions& options, const World& world);

struct EplbPlanOptions {
  std::string weights_path;  // {"weight": [[load per logical expert], ...one row per layer]}
  int64_t num_replicas = 0;
  int64_t num_groups = 1;
  int64_t num_nodes = 1;
  int64_t num_gpus = 1;
  std::string output_path;   // {"phy2log", "log2phy", "logcnt"}
};
int run_eplb_plan(const EplbPlanOptions& options, const World& world);

struct OrderResultsOptions {
  std::string input_path;    // the requests, in the order wanted
  std::string results_path;  // generate's durable output (completion order)
  std::string output_path;
};
int run_order_results(const OrderResultsOptions& options, const World& world);

// deepinfer render (cmd_render.cpp): each request's prompt as the model would see it, without the weights.
struct RenderOptions {
  std::string model_path;  // a model directory or config.json (only the config is read)
  std::string input_path;
  std::string output_path;
  std::string tokenizer_path;   // default: tokenizer.json beside the model
  std::string chat_prose_path;  // default: chat_prose.json beside the tokenizer
  std::string served_model_name;  // generate's
  int64_t kv_cache_tokens = 16384;  // generate's: a prompt past it is refused as generate would
};
int run_render(const RenderOptions& options, const World& world);

}  // namespace deepinfer::app
