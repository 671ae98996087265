// deepinfer: one SPMD binary. Every rank parses the same argv; only rank 0 prints help and errors; every
// rank exits with the same code. This file holds only the command line; the commands live beside it.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "kernels/cpu/host_threads.h"
#include "src/app/commands.h"
#include "src/core/error.h"
#include "src/core/log.h"
#include "src/comm/mpi_session.h"

namespace {

// Bounds of the numeric options: CLI11 refuses a value outside them with a message naming the option (exit 2,
// printed once by rank 0), so no command sees a zero chunk, a negative context or a point too large to allocate.
const CLI::Range kPositive{int64_t{1}, int64_t{1} << 40};
const CLI::Range kNotNegative{int64_t{0}, int64_t{1} << 40};
const CLI::Range kSteps{int64_t{1}, int64_t{1000000}};
const CLI::Range kWarmup{int64_t{0}, int64_t{1000000}};
const CLI::Range kTokens{int64_t{1}, int64_t{1} << 24};  // per prompt, chunk or context: 16 M
const CLI::Range kBatch{int64_t{1}, int64_t{65536}};     // sequences in one step on one rank
const CLI::Range kCount{int64_t{1}, int64_t{1} << 20};   // EPLB's replicas, groups, nodes and GPUs

}  // namespace

int main(int argc, char** argv) {
  deepinfer::MpiSession mpi(&argc, &argv);
  const bool is_rank0 = mpi.world_rank() == 0;

  CLI::App cli{"deepinfer: distributed inference for DeepSeek-style MoE models (run under mpirun)"};
  cli.require_subcommand(1);
  std::string log_dir;
  cli.add_option("--log-dir", log_dir, "Also write every rank's full log to DIR/rank-N.log");

  // Speculative decoding with the controlled drafter; `with_reference`: the drafter proposes the target's own
  // tokens from --draft-reference (generate), else its correctness is drawn (bench: the tokens are not replayed).
  auto add_speculation_options = [](CLI::App* cmd, deepinfer::app::SpeculationCliOptions& spec, bool with_reference) {
    cmd->add_option("--nextn", spec.num_drafts,
                    "Speculative decoding: drafts proposed per sequence and decode step, verified in one forward "
                    "(0: off). The outputs stay those of decoding without it, greedy or sampled")
        ->check(CLI::Range(int64_t{0}, int64_t{16}))
        ->capture_default_str();
    cmd->add_flag("--spec-varlen", spec.variable_length,
                  "With --nextn: verify per sequence only the drafts the confidence-scheduled rule admits (the most "
                  "probable first, as many as maximise expected tokens per ms of the measured step cost)");
    cmd->add_option("--spec-row-quantum", spec.row_quantum,
                    "With --spec-varlen: the rule verifies totals whose rows are a multiple of N only (or none or "
                    "all drafts), so that steps come in few shapes")
        ->check(CLI::Range(int64_t{1}, int64_t{4096}))
        ->capture_default_str();
    if (with_reference)
      cmd->add_option("--draft", spec.drafter,
                      "With --nextn: what drafts — controlled (from --draft-reference), mtp (the checkpoint's "
                      "DeepSeek-V3 MTP layer, one draft a step) or dspark (DeepSeek-V4.1's DSpark layers, up to "
                      "dspark_block_size drafts a step); both on the CPU and CUDA backends")
          ->check(CLI::IsMember({"controlled", "mtp", "dspark"}))
          ->capture_default_str();
    if (with_reference)
      cmd->add_option("--draft-reference", spec.reference_path,
                      "With --nextn: the controlled drafter's knowledge of the target (results of a run without "
                      "speculation, generate's --output): each draft is the target's token with probability c, its "
                      "confidence (drawn per draft, calibrated)");
    // (open at both ends: a confidence of 0 or 1 has no logit to spread)
    const CLI::Validator open_unit(
        [](const std::string& text) {
          char* end = nullptr;
          const double value = std::strtod(text.c_str(), &end);
          const bool number = end != text.c_str() && *end == '\0';
          return number && value > 0.0 && value < 1.0 ? std::string()
                                                      : "Value " + text + " not in range (0, 1) (both excluded)";
        },
        "FLOAT in (0, 1)");
    cmd->add_option("--draft-acceptance", spec.mean_acceptance,
                    "The controlled drafter's mean confidence (= acceptance rate per draft)")
        ->check(open_unit)
        ->capture_default_str();
    cmd->add_option("--draft-spread", spec.spread,
                    "The standard deviation of the logit of each draft's confidence (0: all alike)")
        ->check(CLI::Range(0.0, 10.0))
        ->capture_default_str();
    cmd->add_option("--draft-seed", spec.seed, "Seed of the controlled drafter's draws")->capture_default_str();
  };

  deepinfer::app::InfoOptions info;
  CLI::App* info_cmd = cli.add_subcommand("info", "Print each rank's role, groups, GPU and host");
  info_cmd->add_option("--deploy", info.deploy_path, "Deployment file (configs/deploy/*.toml)")->required();

  deepinfer::app::MemoryOptions memory;
  CLI::App* memory_cmd = cli.add_subcommand("memory", "What one rank of each role holds of a model (config only)");
  memory_cmd->add_option("--deploy", memory.deploy_path, "Deployment file (configs/deploy/*.toml)")->required();
  memory_cmd->add_option("--model", memory.model_path, "Checkpoint directory or its config.json")->required();
  memory_cmd->add_option("--gpu-memory-gib", memory.gpu_memory_gib, "A GPU's memory in GiB (an H200's by default)")
      ->capture_default_str();
  memory_cmd->add_flag("--no-draft-module", memory.no_draft_module,
                       "Leave out V3's MTP layer / V4.1's DSpark layers (counted by default: the engine loads them "
                       "whenever the checkpoint carries them)");
  memory_cmd->add_option("--engram-tables", memory.engram_tables, "V4.1: device | host, as generate's")
      ->capture_default_str();
  memory_cmd->add_option("--engram-split", memory.engram_split, "V4.1: group | none, as generate's")
      ->capture_default_str();
  memory_cmd->add_flag("--no-engram", memory.no_engram, "V4.1 without its engram layers, as generate's");

  auto add_model_options = [](CLI::App* cmd, deepinfer::app::ModelOptions& model) {
    cmd->add_option("--model", model.model_path, "Checkpoint directory, or a config .json with --load-format dummy")
        ->required();
    cmd->add_option("--load-format", model.load_format, "auto | safetensors | dummy (seeded random weights)")
        ->capture_default_str();
    cmd->add_option("--seed", model.seed, "Seed of dummy weights")->capture_default_str();
    cmd->add_option("--device", model.device, "cpu | cuda | auto (cuda when a GPU is visible)")->capture_default_str();
    cmd->add_flag("--no-engram", model.no_engram,
                  "DeepSeek-V4.1: drop the engram layers (for shapes that cannot hold their tables; the outputs then differ "
                  "from the model's)");
    cmd->add_flag("--batch-invariant", model.batch_invariant,
                  "CUDA: compute each row the same way whatever the rows batched with it: every Linear layer with "
                  "one kernel (the skinny tensor-core kernel, 64 rows a launch), the routed experts through one path, "
                  "V4.1's indexer without cuBLAS products, V2/V3's attention absorbed for every row in one KV split, "
                  "expert-parallel entries summed in k order (issue #28); the CPU is batch-invariant within a rank "
                  "anyway");
    cmd->add_option("--engram-tables", model.engram_tables,
                    "DeepSeek-V4.1 on CUDA: keep the engram tables in GPU memory (device) or in pinned host memory, "
                    "each step gathering its rows over PCIe (host)")
        ->check(CLI::IsMember({"device", "host"}))
        ->capture_default_str();
    cmd->add_option("--engram-split", model.engram_split,
                    "DeepSeek-V4.1 under --deploy: split the engram tables by rows across each EP group's ranks, "
                    "each step fetching its rows from their holders (group), or hold them whole on every rank (none)")
        ->check(CLI::IsMember({"group", "none"}))
        ->capture_default_str();
    cmd->add_option("--num-layers", model.num_layers,
                    "Run at this depth: V2/V3 their first N layers; V4.1 N layers that keep every mechanism (the "
                    "candidate source, a pooled KV source, ...; dummy weights only)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--no-cuda-graphs", model.no_cuda_graphs,
                  "CUDA: run every decode step eagerly instead of replaying captured CUDA graphs");
  };

  deepinfer::app::ForwardOptions forward;
  CLI::App* forward_cmd = cli.add_subcommand("forward", "Write the logits of every position of one prompt to HDF5");
  add_model_options(forward_cmd, forward.model);
  forward_cmd->add_option("--tokens", forward.tokens, "Comma-separated token ids, e.g. 1,2,3")->required();
  forward_cmd->add_option("--output", forward.output_path, "HDF5 file; dataset 'logits' [tokens, vocab]")->required();

  deepinfer::app::GenerateOptions generate;
  CLI::App* generate_cmd = cli.add_subcommand("generate", "Offline generation from a JSONL file of requests");
  add_model_options(generate_cmd, generate.model);
  generate_cmd->add_option("--input", generate.input_path, "JSONL: one request per line")->required();
  generate_cmd->add_option("--output", generate.output_path,
                           "JSONL results, each appended as its request finishes (completion order; '-': the "
                           "standard output)")->required();
  generate_cmd->add_flag("--ordered-output", generate.ordered_output,
                         "Write the output once at the end, whole and in input order (holds every result in memory: "
                         "small jobs; needed by requests that give 'continues')");
  generate_cmd->add_flag("--resume", generate.resume,
                         "Continue the job whose --output this is: skip the requests it holds (a torn last line is "
                         "dropped), append the rest");
  generate_cmd->add_option("--bad-requests", generate.bad_requests,
                           "refuse: bad request lines stop the job before any work, each named; record: each gets an "
                           "error record in the output and the rest run")
      ->check(CLI::IsMember({"refuse", "record"}));
  generate_cmd->add_option("--sync-interval", generate.sync_interval_s,
                           "Seconds between syncs of the output to disk (a lost node loses at most this interval's "
                           "lines)")
      ->check(CLI::Range(0.0, 86400.0));
  generate_cmd->add_option("--progress-interval", generate.progress_interval_s,
                           "Seconds between progress lines and status-file updates (0: none until the end)")
      ->check(CLI::Range(0.0, 86400.0));
  generate_cmd->add_option("--status-file", generate.status_file,
                           "JSON status (done, total, rates, time left, state), replaced atomically at each interval "
                           "and at the end");
  generate_cmd->add_option("--drain-timeout", generate.drain_timeout_s,
                           "After SIGTERM or SIGUSR1: seconds the requests in flight may take before the job exits 75 "
                           "(to be requeued) without them")
      ->check(CLI::Range(0.0, 86400.0));
  generate_cmd->add_option("--window", generate.window,
                           "Requests read ahead and handed out together (default: 8 x the running capacity, within "
                           "[256, 32768])")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  generate_cmd->add_option("--grammar-timeout", generate.grammar_timeout_s,
                           "Structured output: the longest a request's constraint (response_format, regex, ebnf) may "
                           "take to compile, in seconds; longer ones are refused")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  generate_cmd->add_option("--grammar-total-timeout", generate.grammar_total_s,
                           "Structured output: the longest the input's distinct constraints may take to compile "
                           "together, checked before the work, in seconds")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  generate_cmd->add_option("--grammar-cache-mb", generate.grammar_cache_mb,
                           "Structured output: the memory compiled grammars are kept in, in MiB (the least recently "
                           "used are evicted and compiled again when needed; a larger one alone is refused)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  generate_cmd->add_option("--tokenizer", generate.tokenizer_path,
                           "A Hugging Face tokenizer.json (byte-level BPE): requests may give 'prompt' text and the "
                           "results carry 'text' (default: the model directory's tokenizer.json, loaded when a "
                           "request gives 'prompt')");
  generate_cmd->add_option("--chat-prose", generate.chat_prose_path,
                           "Chat requests ('messages'): the effort instructions launch/chat_prose.py writes from "
                           "deepseek-recipe (default: chat_prose.json beside the tokenizer)");
  generate_cmd->add_option("--served-model-name", generate.served_model_name,
                           "The name a request's 'model' may give, besides the DeepSeek API's (DeepSeek-V4-Pro, "
                           "DeepSeek-V4.1-Flash); OpenAI results name it (default: the model directory's name)");
  generate_cmd->add_option("--stream", generate.stream_path,
                           "Also write each request's tokens, text and tool calls as they are generated (JSONL, "
                           "flushed as they arrive on rank 0; '-': standard output)");
  generate_cmd->add_option("--kv-cache-tokens", generate.kv_cache_tokens, "KV cache capacity in tokens")
      ->check(kPositive)
      ->capture_default_str();
  generate_cmd->add_option("--gpu-memory-fraction", generate.gpu_memory_fraction,
                           "With --device cuda: size the KV cache so the process uses this fraction of GPU memory "
                           "(overrides --kv-cache-tokens)")
      ->check(CLI::Range(0.0, 1.0));
  generate_cmd->add_option("--max-running", generate.max_running, "Most sequences decoded together")
      ->check(kBatch)
      ->capture_default_str();
  generate_cmd->add_option("--chunk-tokens", generate.chunk_tokens, "Prefill tokens per step (one rank; a "
                           "deployment sets its own)")->check(kTokens)->capture_default_str();
  generate_cmd->add_flag("--prefix-cache", generate.prefix_cache,
                         "Share the KV blocks of common prompt prefixes: a prompt starting with whole blocks another "
                         "request computed on the same rank prefills only the rest (the outputs stay the same)");
  generate_cmd->add_flag("--overlap-schedule,!--no-overlap-schedule", generate.overlap_schedule,
                         "Overlapped scheduling (on by default): each step is scheduled and started before the previous "
                         "step's tokens are postprocessed (its inputs name them by placeholder, filled on the GPU where "
                         "the tokens are; a sequence that stops has run one step more, dropped), so the host's work "
                         "between steps runs while the GPU computes. Not with speculation, structured output or on "
                         "prefill ranks (they run in order); the outputs are the same either way")
      ->capture_default_str();
  generate_cmd->add_flag("--echo-prompt", generate.echo_prompt,
                         "Each result carries prompt_token_ids, the prompt as the model saw it (a chat request's "
                         "rendered template, a continuation's whole conversation), and with a tokenizer prompt_text "
                         "(special tokens spelled out); an OpenAI line carries them in its response body");
  generate_cmd->add_flag("--logits-hashes", generate.logits_hashes,
                         "Each result carries logits_hashes: per output token, a 64-bit fingerprint (16 hex digits) "
                         "of the fp32 logits row it was drawn from, before any mask: equal bits, equal hashes, to "
                         "check batch invariance bit for bit (the CPU and the GPU use the same function)");
  generate_cmd->add_option("--kv-store", generate.kv_store_dir,
                           "Directory every rank of this and later jobs shares as the prefix cache's slower tier: "
                           "each block filled is written there once (atomic rename, checksummed), and a prompt "
                           "whose next block misses on its rank reads it from there (implies --prefix-cache)");
  generate_cmd->add_option("--swa-replay-tokens", generate.swa_replay_tokens,
                           "DeepSeek-V4.1 on the CPU with --kv-store: the store holds the blocks' KV without their "
                           "sliding-window state (kept apart, as DeepInfer does), and a hit from it recomputes the "
                           "window of its last N tokens (an approximation, never stored; at least the window); 0: "
                           "the store keeps the window state and hits are exact")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  generate_cmd->add_option("--yoco-truncation", generate.yoco_truncation,
                           "DeepSeek-V4.1's bounded decoder replay in prefill: off, or mask (the decoder layers' "
                           "windows see only the prompt's last --yoco-keep-tokens: an approximation), or "
                           "compact (the same logits, the rows before them dropped from the first layer past the "
                           "last KV source: the compute saved)")
      ->check(CLI::IsMember({"off", "mask", "compact"}))
      ->capture_default_str();
  generate_cmd->add_option("--yoco-keep-tokens", generate.yoco_keep_tokens,
                           "With --yoco-truncation: the prompt tokens the decoder layers keep (at least the window "
                           "+ 6, DeepInfer's 140 for V4.1)")
      ->check(kNotNegative);
  add_speculation_options(generate_cmd, generate.speculation, true);
  generate_cmd->add_option("--deploy", generate.deploy_path, "Deployment file: run across its prefill/decode ranks");
  generate_cmd->add_option("--eplb-interval", generate.eplb_interval,
                           "Rebalance experts every N steps (with --deploy; default: the deployment's eplb_interval)")
      ->check(kNotNegative);
  generate_cmd->add_option("--redundant-experts", generate.redundant_experts,
                           "Extra expert slots per MoE layer and EP group (default: the deployment's)")
      ->check(kNotNegative);
  generate_cmd->add_option("--expert-plan", generate.expert_plan_path,
                           "Expert placement plan JSON {\"phy2log\": [...]} (with --deploy)");

  deepinfer::app::BenchOptions bench;
  CLI::App* bench_cmd = cli.add_subcommand("bench", "Step benchmarks on one rank, against their floors");
  bench_cmd->require_subcommand(1);
  CLI::App* bench_decode_cmd = bench_cmd->add_subcommand("decode", "Decode steps: batch x context");
  CLI::App* bench_prefill_cmd = bench_cmd->add_subcommand("prefill", "Prefill steps: chunks of fresh prompts");
  for (CLI::App* cmd : {bench_decode_cmd, bench_prefill_cmd}) {
    add_model_options(cmd, bench.model);
    cmd->add_option("--warmup", bench.warmup, "Steps before timing")->check(kWarmup)->capture_default_str();
    cmd->add_option("--steps", bench.steps, "Timed steps (median and p90 reported)")->check(kSteps)->capture_default_str();
    cmd->add_option("--output", bench.output_path, "Also write each point: an HDF5 table <phase>/points (X.h5) or JSON lines");
    cmd->add_option("--rank-slice", bench.rank_slice_deploy,
                    "Run what one rank of this deployment runs, alone: its attention for its own requests, its own "
                    "experts over the pairs every rank of its EP group would send it (needs --slice-rank, --routing)");
    cmd->add_option("--slice-rank", bench.slice_rank, "World rank of --rank-slice's deployment to stand for");
    cmd->add_option("--expert-plan", bench.expert_plan_path, "Expert placement plan JSON (with --rank-slice)");
    cmd->add_option("--routing", bench.routing, "Route by a drawn distribution: uniform or zipf:S (0 < S <= 2)");
    cmd->add_option("--routing-seed", bench.routing_seed, "Seed of --routing")->capture_default_str();
  }
  bench_decode_cmd->add_option("--batch", bench.batches, "Sequences per step")->delimiter(',')->check(kBatch)
      ->capture_default_str();
  bench_decode_cmd->add_option("--context", bench.contexts, "Tokens already cached per sequence")->delimiter(',')
      ->check(kTokens)->capture_default_str();
  add_speculation_options(bench_decode_cmd, bench.speculation, false);
  // --chunk: the name of the recorded commands in results/ before it became --chunk-tokens.
  bench_prefill_cmd->add_option("--chunk-tokens,--chunk", bench.chunks, "Prefill tokens per step")->delimiter(',')->check(kTokens)
      ->capture_default_str();
  bench_prefill_cmd->add_option("--prompt-len", bench.prompt_len, "Tokens per prompt")->check(kTokens)
      ->capture_default_str();
  bench_prefill_cmd->add_option("--yoco-truncation", bench.yoco_truncation,
                                "DeepSeek-V4.1's bounded decoder replay, as generate's: off, mask or compact")
      ->check(CLI::IsMember({"off", "mask", "compact"}))
      ->capture_default_str();
  bench_prefill_cmd->add_option("--yoco-keep-tokens", bench.yoco_keep_tokens,
                                "With --yoco-truncation: the prompt tokens the decoder layers keep (at least the "
                                "window + 6)")
      ->check(kNotNegative);

  deepinfer::app::DispatchBenchCliOptions dispatch;
  CLI::App* bench_dispatch_cmd = bench_cmd->add_subcommand(
      "dispatch", "The expert-parallel dispatch and combine against ncclAlltoAll (one GPU per rank, EP = world)");
  bench_dispatch_cmd->add_option("--tokens", dispatch.tokens, "Tokens per rank")->delimiter(',')->capture_default_str();
  bench_dispatch_cmd->add_option("--hidden", dispatch.hiddens, "Hidden sizes")->delimiter(',')->capture_default_str();
  bench_dispatch_cmd->add_option("--top-k", dispatch.top_ks, "Experts per token (6: 64 experts, else 256)")
      ->delimiter(',')
      ->capture_default_str();
  bench_dispatch_cmd->add_option("--warmup", dispatch.warmup, "Untimed iterations")->check(kWarmup)
      ->capture_default_str();
  bench_dispatch_cmd->add_option("--iters", dispatch.iters, "Timed iterations (median)")->check(kSteps)
      ->capture_default_str();
  bench_dispatch_cmd->add_option("--output", dispatch.output_path, "Also append one JSON line per row to this file");

  deepinfer::app::SweepCliOptions sweep;
  CLI::App* sweep_cmd = cli.add_subcommand("sweep", "Pareto sweeps across a deployment, to HDF5");
  sweep_cmd->require_subcommand(1);
  CLI::App* sweep_prefill_cmd = sweep_cmd->add_subcommand("prefill", "Points: tokens per step per prefill rank");
  CLI::App* sweep_decode_cmd = sweep_cmd->add_subcommand("decode", "Points: concurrent requests per decode rank");
  for (CLI::App* cmd : {sweep_prefill_cmd, sweep_decode_cmd}) {
    add_model_options(cmd, sweep.model);
    cmd->add_option("--deploy", sweep.deploy_path, "Deployment file")->required();
    cmd->add_option("--points", sweep.run.points, "Comma-separated points")->delimiter(',')->check(kTokens)->required();
    cmd->add_option("--output", sweep.run.output_path, "HDF5 file (rows appended and flushed per point)")->required();
    cmd->add_option("--expert-plan", sweep.expert_plan_path, "Expert placement plan JSON");
    cmd->add_option("--routing", sweep.routing,
                    "Route by a drawn distribution, not the router: uniform or zipf:S (0 < S <= 2); the EP exchange "
                    "then runs over MPI host memory");
    cmd->add_option("--routing-seed", sweep.routing_seed, "Seed of --routing")->capture_default_str();
    cmd->add_option("--warmup", sweep.run.warmup, "Steps before timing, per point")->check(kWarmup)->capture_default_str();
    cmd->add_option("--steps", sweep.run.steps, "Timed steps per point")->check(kSteps)->capture_default_str();
  }
  sweep_prefill_cmd->add_option("--prompt-len", sweep.run.prompt_len, "Tokens per prompt (capped at the point)")
      ->check(kTokens)->capture_default_str();
  sweep_decode_cmd->add_option("--context", sweep.run.context, "Tokens cached per request")->check(kTokens)
      ->capture_default_str();
  sweep_decode_cmd->add_option("--nextn", sweep.run.num_drafts, "Draft tokens per step for the converted figures (0-16)")
      ->check(CLI::Range(int64_t{0}, int64_t{16}))->capture_default_str();
  sweep_decode_cmd->add_option("--acceptance", sweep.run.acceptance, "Acceptance rate of the drafts")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sweep_decode_cmd->add_flag("--spec-measured", sweep.run.spec_measured,
                             "Also run each point with speculative decoding (--nextn drafts a step from the controlled "
                             "drafter, mean acceptance --acceptance, correctness drawn) and record the measured "
                             "tokens a step and step time beside the converted figures");
  sweep_decode_cmd->add_option("--draft-spread", sweep.run.draft_spread,
                               "With --spec-measured: the standard deviation of the logit of each draft's confidence")
      ->check(CLI::Range(0.0, 10.0))->capture_default_str();

  deepinfer::app::EplbPlanOptions eplb;
  CLI::App* eplb_cmd = cli.add_subcommand("eplb", "Expert-parallel load balancing");
  eplb_cmd->require_subcommand(1);
  CLI::App* eplb_plan_cmd = eplb_cmd->add_subcommand("plan", "Compute a placement plan from expert loads");
  eplb_plan_cmd->add_option("--weights", eplb.weights_path, "JSON {\"weight\": [[...], ...]}, one row per layer")->required();
  eplb_plan_cmd->add_option("--num-replicas", eplb.num_replicas, "Physical expert slots per layer")
      ->check(kCount)->required();
  eplb_plan_cmd->add_option("--num-groups", eplb.num_groups, "Expert groups")->check(kCount)
      ->capture_default_str();
  eplb_plan_cmd->add_option("--num-nodes", eplb.num_nodes, "Nodes")->check(kCount)
      ->capture_default_str();
  eplb_plan_cmd->add_option("--num-gpus", eplb.num_gpus, "GPUs (EP ranks)")->check(kCount)
      ->required();
  eplb_plan_cmd->add_option("--output", eplb.output_path, "Plan JSON {phy2log, log2phy, logcnt}")->required();

  deepinfer::app::OrderResultsOptions order;
  deepinfer::app::RenderOptions render;
  CLI::App* render_cmd = cli.add_subcommand(
      "render", "Each request's prompt as the model would see it (template rendered, text encoded, limits checked), "
                "without loading the weights: a batch file checked before a long job");
  render_cmd->add_option("--model", render.model_path, "The model directory or config.json (only the config is read)")
      ->required();
  render_cmd->add_option("--input", render.input_path, "The requests (JSONL: generate's lines or OpenAI batch lines)")
      ->required();
  render_cmd->add_option("--output", render.output_path,
                         "One line a request: id or custom_id, prompt_token_ids, prompt_text, prompt_tokens, "
                         "max_new_tokens; an error record for a bad line (exit 2 once all are written)")
      ->required();
  render_cmd->add_option("--tokenizer", render.tokenizer_path, "A tokenizer.json (default: beside the model)");
  render_cmd->add_option("--chat-prose", render.chat_prose_path,
                         "DeepSeek's chat instructions (default: chat_prose.json beside the tokenizer)");
  render_cmd->add_option("--served-model-name", render.served_model_name,
                         "The name a request's 'model' may give besides the DeepSeek API's (as generate)");
  render_cmd->add_option("--kv-cache-tokens", render.kv_cache_tokens,
                         "The KV cache generate will run with: a request that cannot fit it is refused")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  CLI::App* order_cmd = cli.add_subcommand("order-results", "A finished generate output rewritten in input order");
  order_cmd->add_option("--input", order.input_path, "The requests (JSONL) the job read")->required();
  order_cmd->add_option("--results", order.results_path, "The job's output (results in completion order)")->required();
  order_cmd->add_option("--output", order.output_path, "The results in input order, written whole")->required();

  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank reaches the same verdict; only rank 0 speaks.
    std::ostringstream sink;
    const int cli_code = is_rank0 ? cli.exit(e) : cli.exit(e, sink, sink);
    mpi.finalize();
    return cli_code == 0 ? 0 : deepinfer::kExitInputError;  // --help is success; a bad flag is bad input
  }

  deepinfer::LogOptions log_options;
  if (!log_dir.empty()) log_options.log_dir = log_dir;
  deepinfer::init_logging(mpi.world_rank(), log_options);

  const deepinfer::World world = mpi.world();
  const deepinfer::World::HostRanks host = world.host_ranks();
  const int threads = deepinfer::cpu::share_host_threads(host.size);
  if (host.size > 1)
    spdlog::debug("CPU ops: {} threads a rank ({} ranks share this host; OMP_NUM_THREADS overrides)", threads, host.size);
  int code = 0;
  if (info_cmd->parsed()) code = deepinfer::app::run_info(info, world);
  else if (memory_cmd->parsed()) code = deepinfer::app::run_memory(memory, world);
  else if (forward_cmd->parsed()) code = deepinfer::app::run_forward(forward, world);
  else if (generate_cmd->parsed()) code = deepinfer::app::run_generate(generate, world);
  else if (order_cmd->parsed()) code = deepinfer::app::run_order_results(order, world);
  else if (render_cmd->parsed()) code = deepinfer::app::run_render(render, world);
  else if (eplb_plan_cmd->parsed()) code = deepinfer::app::run_eplb_plan(eplb, world);
  else if (sweep_prefill_cmd->parsed() || sweep_decode_cmd->parsed()) {
    sweep.run.phase = sweep_prefill_cmd->parsed() ? "prefill" : "decode";
    code = deepinfer::app::run_sweep(sweep, world);
  } else if (bench_dispatch_cmd->parsed()) {
    code = deepinfer::app::run_bench_dispatch(dispatch, world);
  } else if (bench_decode_cmd->parsed() || bench_prefill_cmd->parsed()) {
    bench.phase = bench_decode_cmd->parsed() ? "decode" : "prefill";
    code = deepinfer::app::run_bench(bench, world);
  }
  mpi.finalize();
  return code;
}
