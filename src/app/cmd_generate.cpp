// `deepinfer generate --model M --input prompts.jsonl --output out.jsonl [--deploy D]`: offline generation,
// across the roles of a deployment under mpirun, or without --deploy on a deployment of one colocated rank.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <list>
#include <numeric>
#include <optional>

#include "src/app/generate_job.h"
#include "src/app/jsonl.h"
#include "src/app/model_loading.h"
#include "src/app/prompt_sources.h"
#include "src/app/replay_options.h"
#include "src/engine/controlled_drafter.h"
#include "src/engine/structured_output.h"
#include "src/app/spmd_command.h"
#include "src/app/spmd_setup.h"
#include "src/core/files.h"
#include "src/core/stop_signal.h"
#include "src/comm/mpi_communicator.h"
#ifdef DEEPINFER_HAVE_CUDA
#include "src/comm/nccl_communicator.h"
#endif
#include "src/comm/topology.h"
#include "src/engine/engine.h"
#include "src/engine/spmd_generation.h"
#include "src/model/architectures.h"
#include "src/model/model_digest.h"
#include "src/moe/expert_parallel.h"

namespace deepinfer::app {

namespace {

void log_summary(const std::vector<RequestResult>& results, double seconds) {
  int64_t generated = 0, prefill_tokens = 0, failed = 0;
  for (const RequestResult& r : results) {
    generated += static_cast<int64_t>(r.output_token_ids.size());
    prefill_tokens += r.prompt_tokens;
    failed += r.failure ? 1 : 0;
  }
  if (failed > 0) spdlog::warn("{} of {} requests failed after they started: their lines are error records", failed,
                               results.size());
  spdlog::info("{} requests: {} prompt tokens, {} generated tokens in {:.3f} s ({:.1f} generated tok/s, "
               "{:.1f} total tok/s)", results.size(), prefill_tokens, generated, seconds, generated / seconds,
               (prefill_tokens + generated) / seconds);
}

void log_rank_reports(const std::vector<RankReport>& reports) {
  // One line per role: what its ranks did and what crossed the wire.
  for (Role role : {Role::kPrefill, Role::kDecode, Role::kColocated}) {
    RankReport sum;
    int64_t num_ranks = 0, max_steps = 0;
    for (const RankReport& r : reports) {
      if (r.role != static_cast<int64_t>(role)) continue;
      ++num_ranks;
      max_steps = std::max(max_steps, r.steps);
      sum.prefill_tokens += r.prefill_tokens;
      sum.decode_tokens += r.decode_tokens;
      sum.moe_dispatch_bytes += r.moe_dispatch_bytes;
      sum.moe_combine_bytes += r.moe_combine_bytes;
      sum.handoff_bytes += r.handoff_bytes;
      sum.sequences += r.sequences;
      sum.prefix_hit_tokens += r.prefix_hit_tokens;
      sum.prefix_store_tokens += r.prefix_store_tokens;
      sum.prefix_replayed_tokens += r.prefix_replayed_tokens;
      sum.replay_rows_below_floor += r.replay_rows_below_floor;
      sum.replay_skipped_layer_rows += r.replay_skipped_layer_rows;
      sum.spec_sequence_steps += r.spec_sequence_steps;
      sum.spec_drafted += r.spec_drafted;
      sum.spec_verified += r.spec_verified;
      sum.spec_accepted += r.spec_accepted;
      sum.decode_us += r.decode_us;
      sum.device_idle_steps += r.device_idle_steps;
      sum.device_idle_us += r.device_idle_us;
    }
    if (num_ranks == 0) continue;
    spdlog::info("{} ranks x{}: {} steps (most on one rank), {} prefill + {} decode tokens, {} sequences; MoE "
                 "dispatch {:.2f} MB + combine {:.2f} MB to other ranks ({:.1f} KB per step per rank), KV handoff "
                 "{:.2f} MB; prefix cache hits {} prompt tokens ({} from --kv-store, {} of them replayed: SWA "
                 "replay)", role_name(role), num_ranks,
                 max_steps,
                 sum.prefill_tokens, sum.decode_tokens, sum.sequences, sum.moe_dispatch_bytes / 1e6,
                 sum.moe_combine_bytes / 1e6,
                 (sum.moe_dispatch_bytes + sum.moe_combine_bytes) / 1e3 / std::max<int64_t>(1, max_steps) / num_ranks,
                 sum.handoff_bytes / 1e6, sum.prefix_hit_tokens, sum.prefix_store_tokens, sum.prefix_replayed_tokens);
    if (sum.replay_rows_below_floor > 0)
      spdlog::info("{} ranks: bounded replay: {} prompt rows below the decoder layers' floor, {} (row, layer) pairs "
                   "not computed", role_name(role), sum.replay_rows_below_floor, sum.replay_skipped_layer_rows);
    if (sum.device_idle_steps > 0)  // (the CUDA backend measures it)
      spdlog::info("{} ranks: decode steps {:.1f} tok/s a rank, device idle before a step {:.3f} ms on average over "
                   "{} steps (with a model drafter, before its draft too)", role_name(role), sum.decode_tokens / std::max(1e-9, sum.decode_us / 1e6),
                   sum.device_idle_us / 1e3 / sum.device_idle_steps, sum.device_idle_steps);
    if (sum.spec_sequence_steps > 0) {
      const auto per = [&](int64_t n) { return static_cast<double>(n) / sum.spec_sequence_steps; };
      spdlog::info("{} ranks: speculative decoding: {} sequence steps, per step {:.3f} drafted, {:.3f} verified, "
                   "{:.3f} accepted ({:.3f} tokens a step)", role_name(role), sum.spec_sequence_steps,
                   per(sum.spec_drafted), per(sum.spec_verified), per(sum.spec_accepted), 1 + per(sum.spec_accepted));
    }
  }
}

// Adds one run's reports (one per world rank) to those of the runs before (a durable job's windows).
void add_reports(std::vector<RankReport>& total, const std::vector<RankReport>& run) {
  constexpr int kFields = sizeof(RankReport) / sizeof(int64_t);
  if (total.empty()) {
    total = run;
    return;
  }
  for (size_t r = 0; r < run.size(); ++r) {
    auto* sum = reinterpret_cast<int64_t*>(&total[r]);
    const auto* add = reinterpret_cast<const int64_t*>(&run[r]);
    for (int f = 2; f < kFields; ++f) sum[f] += add[f];  // (past world_rank and role)
  }
}

// The window a durable job reads ahead: several times the running capacity of the ranks that decode, so that the
// running set empties only briefly at each window's end, within bounds that keep every rank's copy small.
int64_t default_window(const Deployment& deployment) {
  int64_t capacity = 0;
  for (const RoleSpec& role : deployment.roles)
    if (role.role != Role::kPrefill) capacity += int64_t{role.num_ranks} * role.max_running;
  return std::clamp<int64_t>(8 * capacity, 256, 32768);
}

// Requests that continue earlier ones (their "continues") run in waves: wave k holds those k continuations deep,
// each one's prompt the conversation so far (its parent's prompt and output) followed by its own tokens. World
// rank 0 has each wave's results and shares their outputs with every rank, which builds the next wave the same
// way. `run_wave` runs one wave (requests indexed within it) and returns its results on world rank 0; the results
// come back in input order (on rank 0), each with its whole prompt's length.
// The waves' request vectors live in `waves` (the engine that runs them keeps pointers to them).
std::vector<RequestResult> generate_in_waves(
    const std::vector<Request>& requests, const ModelConfig& config, const EngineOptions& engine_options,
    Communicator& world_comm, std::list<std::vector<Request>>& waves,
    const std::function<std::vector<RequestResult>(const std::vector<Request>&, const std::vector<int64_t>&)>& run_wave) {
  const auto n = static_cast<int64_t>(requests.size());
  std::vector<int64_t> depth(n, 0);
  for (int64_t i = 0; i < n; ++i)
    if (requests[i].continues >= 0) depth[i] = depth[requests[i].continues] + 1;
  std::vector<std::vector<int32_t>> conversation(n);  // prompt + output, once a request has run
  std::vector<RequestResult> results(n);
  // A request that cannot run (its whole prompt too long, known only when its wave starts; or the one it continues
  // failed) fails alone: an error record, and every rank skips it alike (the checks are the same everywhere).
  std::vector<bool> failed(n, false);
  const auto fail = [&](int64_t i, std::string code, std::string message) {
    failed[i] = true;
    results[i].index = i;
    results[i].id = requests[i].id;
    results[i].failure = RequestFailure{std::move(code), std::move(message)};
  };
  const int64_t deepest = *std::max_element(depth.begin(), depth.end());
  for (int64_t wave_depth = 0; wave_depth <= deepest; ++wave_depth) {
    std::vector<Request>& wave = waves.emplace_back();
    std::vector<int64_t> original;
    for (int64_t i = 0; i < n; ++i) {
      if (depth[i] != wave_depth) continue;
      Request r = requests[i];
      if (r.continues >= 0) {
        if (failed[r.continues]) {
          fail(i, "continues_a_failed_request", fmt::format("request id {}: the request it continues (id {}) failed",
                                                            r.id.dump(), requests[r.continues].id.dump()));
          continue;
        }
        std::vector<int32_t> prompt = conversation[r.continues];
        prompt.insert(prompt.end(), r.prompt_token_ids.begin(), r.prompt_token_ids.end());
        r.prompt_token_ids = std::move(prompt);
        try {
          Engine::validate(config, engine_options, r);  // its whole prompt is known only now
        } catch (const InputError& e) {
          fail(i, "invalid_request", e.what());
          continue;
        }
      }
      r.index = static_cast<int64_t>(wave.size());
      wave.push_back(std::move(r));
      original.push_back(i);
    }
    std::vector<RequestResult> wave_results = wave.empty() ? std::vector<RequestResult>() : run_wave(wave, original);
    // Every rank needs the outputs for the next wave's prompts: their lengths (-1: it failed), then the tokens, from
    // rank 0.
    std::vector<int64_t> lengths(wave.size(), 0);
    if (world_comm.rank() == 0)
      for (size_t k = 0; k < wave.size(); ++k)
        lengths[k] = wave_results[k].failure ? -1 : static_cast<int64_t>(wave_results[k].output_token_ids.size());
    world_comm.broadcast(lengths.data(), static_cast<int64_t>(lengths.size()), DType::kI64, 0, "the wave's output lengths");
    std::vector<int32_t> tokens;
    int64_t total = 0;
    for (size_t k = 0; k < wave.size(); ++k) {
      if (lengths[k] < 0) continue;
      total += lengths[k];
      if (world_comm.rank() == 0)
        tokens.insert(tokens.end(), wave_results[k].output_token_ids.begin(), wave_results[k].output_token_ids.end());
    }
    tokens.resize(total);
    world_comm.broadcast(tokens.data(), static_cast<int64_t>(tokens.size()), DType::kI32, 0, "the wave's outputs");
    int64_t at = 0;
    for (size_t k = 0; k < wave.size(); ++k) {
      if (world_comm.rank() == 0) {
        results[original[k]] = std::move(wave_results[k]);
        results[original[k]].index = original[k];
      }
      if (lengths[k] < 0) {
        failed[original[k]] = true;
        continue;
      }
      std::vector<int32_t>& c = conversation[original[k]];
      c = wave[k].prompt_token_ids;
      c.insert(c.end(), tokens.begin() + at, tokens.begin() + at + lengths[k]);
      at += lengths[k];
    }
  }
  if (world_comm.rank() != 0) results.clear();
  return results;
}

// With --gpu-memory-fraction, the KV cache takes what the weights and a step reserve leave of that budget.
void size_kv_cache_from_memory(const CausalLm& model, const GenerateOptions& options, const std::vector<Request>& requests,
                               EngineOptions& engine_options) {
  if (options.gpu_memory_fraction <= 0.0) return;
  constexpr size_t kStepReserveBytes = size_t{2} << 30;
  engine_options.kv_cache_tokens = kv_tokens_for_memory_fraction(model, options.gpu_memory_fraction, kStepReserveBytes);
  spdlog::info("KV cache: {} tokens ({:.2f} GiB) from --gpu-memory-fraction {}", engine_options.kv_cache_tokens,
               engine_options.kv_cache_tokens * model.kv_cache_bytes_per_token() / double(1 << 30),
               options.gpu_memory_fraction);
  for (const Request& request : requests) Engine::validate(model.config(), engine_options, request);
}

}  // namespace

namespace {

// Structured output over the tokenizer's vocabulary: each token's bytes (special and added tokens none: never
// admitted), the model's vocabulary size and EOS tokens.
std::unique_ptr<StructuredOutput> make_structured_output(const text::BpeTokenizer& tokenizer, const ModelConfig& config,
                                                         const GrammarLimits& limits) {
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_special(id) && !tokenizer.is_added(id)) bytes[id] = tokenizer.token_bytes(id);
  std::vector<int32_t> stops(config.eos_token_ids.begin(), config.eos_token_ids.end());
  return std::make_unique<StructuredOutput>(std::move(bytes), config.vocab_size, std::move(stops), limits);
}

}  // namespace

int run_generate(const GenerateOptions& options_in, const World& world) {
  GenerateOptions options = options_in;
  if (options.output_path == "-") options.output_path = "/dev/stdout";  // as --stream - is
  install_stop_signals();  // SIGTERM / SIGUSR1 drain a durable job (world rank 0 acts); SIGPIPE ignored
  const bool durable = !options.ordered_output;
  std::vector<Request> requests;                // --ordered-output: the whole input, on every rank
  std::optional<InputScan> scan;                // durable: world rank 0's first reading of the input
  std::optional<ModelConfig> model_config;
  std::optional<PromptSources> prompts;  // the tokenizer and the chat instructions, loaded as lines need them
  std::vector<OutputReading> readings;
  std::vector<BatchLineFormat> formats;  // --ordered-output: each request's line form (OpenAI batch or not)
  ReplayOptions replay;  // V4.1's bounded decoder replay (off unless asked)
  std::unique_ptr<ControlledDrafter> drafter;  // with --nextn
  std::unique_ptr<StructuredOutput> structured;  // where requests have constraints
  // Chat requests' stop sequences, read where their sequences decode (the tokenizer only loaded for one that has).
  StopSequences stops([&]() -> const text::BpeTokenizer& { return prompts->tokenizer(); });
  SpmdSetup spmd;
  EngineOptions engine_options;
  engine_options.stops = &stops;
  engine_options.kv_cache_tokens = options.kv_cache_tokens;
  engine_options.limits.max_running = options.max_running;
  engine_options.limits.chunk_tokens = options.chunk_tokens;
  // Structured output over the tokenizer, made when the first constrained request is read.
  const auto structured_output = [&]() -> StructuredOutput& {
    if (!structured) {
      DI_INPUT_CHECK(prompts->loaded() || prompts->has_tokenizer_file(),
                     "requests have output constraints (response_format, regex, ebnf): structured output masks the "
                     "vocabulary through the tokenizer: pass --tokenizer tokenizer.json (the model has none beside it)");
      structured = make_structured_output(prompts->tokenizer(), *model_config,
                                          GrammarLimits{options.grammar_timeout_s, options.grammar_total_s,
                                                        options.grammar_cache_mb << 20});
      engine_options.structured = structured.get();  // (Engine::validate admits constrained requests by it)
    }
    return *structured;
  };
  ChatSource chat;
  // A durable job's line: read, its constraint compiled, checked against the model and the engine's sizes.
  const LineParser parse_line = [&](const std::string& text, const std::string& where, int64_t ordinal,
                                    OutputReading& reading, BatchLineFormat& format) {
    nlohmann::json continues;
    Request request =
        parse_request_line(text, where, ordinal, prompts->tokenizer_source(), chat, reading, &format, &continues);
    DI_INPUT_CHECK(continues.is_null(), "{}: 'continues' runs conversations in waves over the whole input: pass "
                   "--ordered-output", where);
    // Checked by world rank 0 alone (the scan); the other ranks compile a constraint when they run its request.
    if (request.constraint && world.rank() == 0)
      structured_output().compile(*request.constraint, fmt::format("{}: request id {}", where, request.id.dump()));
    else if (request.constraint)
      structured_output();
    try {
      Engine::validate(*model_config, engine_options, request);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", where, e.what()));
    }
    return request;
  };
  const auto all_inputs = [&] {
    return input_files(options.model.model_path, {options.input_path, options.deploy_path, options.expert_plan_path,
                                                  options.speculation.reference_path, options.tokenizer_path,
                                                  options.chat_prose_path});
  };
  DurableJobOptions job;
  job.input = options.input_path;
  job.output = options.output_path;
  job.status_file = options.status_file;
  job.resume = options.resume;
  job.record_bad_requests = options.bad_requests == "record";
  job.sync_interval_s = options.sync_interval_s;
  job.progress_interval_s = options.progress_interval_s;
  job.drain_timeout_s = options.drain_timeout_s;

  auto prepare = [&] {
    DI_INPUT_CHECK(options.kv_cache_tokens > 0 && options.max_running > 0 && options.chunk_tokens > 0,
                   "--kv-cache-tokens, --max-running and --chunk-tokens must be positive");
    const std::filesystem::path model_path(options.model.model_path);
    DI_INPUT_CHECK(std::filesystem::exists(model_path), "--model '{}' does not exist", model_path.string());
    DI_INPUT_CHECK(!options.ordered_output || (!options.resume && options.bad_requests == "refuse"),
                   "--ordered-output writes the output once at the end: it takes neither --resume nor --bad-requests "
                   "record");
    // Before any work: an output that cannot be written, or that would replace an input, is refused now.
    const OutputKind output_kind = check_output_path(options.output_path, "--output", all_inputs());
    DI_INPUT_CHECK(!options.resume || output_kind == OutputKind::kRegular,
                   "--resume continues a file: --output '{}' is a device or a pipe", options.output_path);
    if (!options.status_file.empty()) {
      DI_INPUT_CHECK(durable, "--status-file reports a durable job's progress: drop --ordered-output");
      DI_INPUT_CHECK(options.status_file != options.output_path, "--status-file and --output name the same file");
      check_output_path(options.status_file, "--status-file", all_inputs(), /*allow_special=*/false);
    }
    if (!options.kv_store_dir.empty()) {  // (before any output is opened; the store's own open says the same)
      std::error_code error;
      std::filesystem::create_directories(options.kv_store_dir, error);
      DI_INPUT_CHECK(std::filesystem::is_directory(options.kv_store_dir),
                     "--kv-store '{}' is not a directory and cannot be made one{}", options.kv_store_dir,
                     error ? ": " + error.message() : "");
    }
    if (!options.stream_path.empty() && options.stream_path != "-") {
      DI_INPUT_CHECK(options.stream_path != options.output_path, "--stream and --output name the same file");
      check_output_path(options.stream_path, "--stream", all_inputs());
    }
    model_config = load_model_config(model_path);
    prompts.emplace(*model_config, model_path, options.tokenizer_path, options.chat_prose_path,
                    options.served_model_name);
    if (!options.tokenizer_path.empty()) prompts->tokenizer();
    job.model_name = prompts->served_model_name();  // what OpenAI results name where a request names none
    const ModelConfig& config = *model_config;
    replay = replay_options(config, options.yoco_truncation, options.yoco_keep_tokens);
    // SWA replay: the window a hit replays must at least cover the sliding window (0: the store keeps it).
    DI_INPUT_CHECK(options.swa_replay_tokens == 0 || config.v41.sliding_window == 0 ||
                       options.swa_replay_tokens >= config.v41.sliding_window,
                   "--swa-replay-tokens {} is below the sliding window of {} tokens (0 keeps the window in the store)",
                   options.swa_replay_tokens, config.v41.sliding_window);
    chat = prompts->chat_source();
    if (!durable) {
      requests = read_requests(options.input_path, prompts->tokenizer_source(), chat, &readings, &formats);
      for (const Request& r : requests)  // checked by world rank 0 (the vote tells the others)
        if (r.constraint && world.rank() == 0)
          structured_output().compile(*r.constraint, fmt::format("request id {}", r.id.dump()));
        else if (r.constraint)
          structured_output();
      for (const Request& request : requests) Engine::validate(config, engine_options, request);
    } else if (world.rank() == 0) {  // only world rank 0 reads the input (again, a window at a time, in execute)
      scan = scan_input(job, parse_line);
    }
    if (structured) engine_options.structured = structured.get();
    const SpeculationCliOptions& spec = options.speculation;
    spec.check(options.model.batch_invariant);
    if (spec.num_drafts > 0 && spec.drafter == "controlled") {
      DI_INPUT_CHECK(!spec.reference_path.empty(),
                     "--nextn needs --draft-reference FILE (the controlled drafter) or --draft mtp");
      drafter = std::make_unique<ControlledDrafter>(spec.controlled(), config.vocab_size,
                                                    read_draft_reference(spec.reference_path, config.vocab_size));
    }
    DI_INPUT_CHECK(spec.drafter != "mtp" || (spec.num_drafts == 1 && spec.reference_path.empty()),
                   "--draft mtp: one MTP layer drafts one token a step (--nextn 1), from no --draft-reference");
    DI_INPUT_CHECK(spec.drafter != "dspark" || spec.reference_path.empty(),
                   "--draft dspark drafts from the model, from no --draft-reference");
    // Without --deploy: the one-rank case of the same SPMD path.
    SpmdSetupOptions setup{options.deploy_path, std::nullopt, options.expert_plan_path, options.eplb_interval,
                           options.redundant_experts};
    if (options.deploy_path.empty()) {
      require_single_rank(world, "generate without --deploy");
      setup.deployment = Deployment::single_rank(static_cast<int>(options.chunk_tokens),
                                                 static_cast<int>(options.max_running));
    }
    spmd.prepare(options.model, setup, world);
    job.window = options.window > 0 ? options.window : default_window(spmd.deployment());
    if (spec.model_drafter()) {
      const bool dspark = spec.drafter == "dspark";
      const std::string tensor = draft_module_tensor(config, dspark);
      DI_INPUT_CHECK(!dspark || config.v41.dspark.unusable.empty(), "--draft dspark: {}", config.v41.dspark.unusable);
      DI_INPUT_CHECK(spmd.has_loaded_weights(), "--draft {}: dummy weights generated on the GPU leave the draft module "
                     "out (benchmarks/drafter_bench times it on generated weights); load a checkpoint that carries it",
                     spec.drafter);
      DI_INPUT_CHECK(config.num_nextn_predict_layers > 0 && (!dspark || config.v41.dspark.enabled()) &&
                         spmd.has_loaded_weight(tensor),
                     "--draft {}: the checkpoint has no {} ({} and its modules{}): it cannot draft", spec.drafter,
                     dspark ? "DSpark draft layers" : "MTP layer", tensor, dspark ? ", dspark_* in its config" : "");
      DI_INPUT_CHECK(!dspark || spec.num_drafts <= config.v41.dspark.block_size,
                     "--draft dspark drafts blocks of {} tokens (dspark_block_size in its config): --nextn {} asks for more",
                     config.v41.dspark.block_size, spec.num_drafts);
    }
  };

  int exit_code = 0;
  auto execute = [&] {
    const auto start = std::chrono::steady_clock::now();
    spmd.start(world);
    Topology& topo = spmd.topology();
    CausalLm& model = spmd.model();
    // Before any engine makes its cache: the draft module's layers are in it, on every rank alike.
    if (options.speculation.model_drafter()) require_draft_module(model).enable();
    size_kv_cache_from_memory(model, options, requests, engine_options);
    MpiCommunicator world_comm(world.comm());
    if (durable) {  // what world rank 0 learned of the input, for every rank: constraints need the grammar engine
      int64_t constrained = scan && scan->constrained ? 1 : 0;
      world_comm.broadcast(&constrained, 1, DType::kI64, 0, "whether requests have constraints");
      if (constrained != 0) engine_options.structured = &structured_output();
    }
    engine_options.prefix_cache = options.prefix_cache;
    engine_options.logits_hashes = options.logits_hashes;
    engine_options.echo_prompt = options.echo_prompt;
    engine_options.overlap_schedule = options.overlap_schedule;
    engine_options.replay = replay;
    engine_options.kv_store_dir = options.kv_store_dir;
    engine_options.swa_replay_tokens = options.swa_replay_tokens;
    engine_options.speculation = options.speculation.engine_options(drafter.get());
    // What the KV depends on besides the tokens: files written under another key are never read.
    // (The draft module's cache layers too: a block stored without them does not fit a cache that has them.)
    engine_options.kv_store_model_key =
        fmt::format("{}|{}|seed {}|layers {}|engram {}|draft module {}",
                    options.kv_store_dir.empty() ? "" : model_content_digest(options.model.model_path),
                    options.model.load_format,
                    options.model.seed, model.config().num_hidden_layers, options.model.no_engram ? "off" : "on",
                    engine_options.speculation.model_drafter ? options.speculation.drafter : "none");
    SpmdGenerationOptions generation;
    generation.engine = engine_options;
    generation.timeout_s = default_comm_timeout_s();
    std::unique_ptr<StreamWriter> stream;
    const std::vector<int64_t>* wave_original = nullptr;  // the running wave's requests' input positions
    if (!options.stream_path.empty()) {
      generation.stream_tokens = true;  // every rank sends; world rank 0 writes
      if (topo.world_rank() == 0) {
        stream = std::make_unique<StreamWriter>(options.stream_path, prompts->loaded_tokenizer());
        generation.on_tokens = [&](int64_t request, int64_t, std::span<const int32_t> tokens) {
          stream->tokens(wave_original != nullptr ? (*wave_original)[request] : request, tokens);
        };
      }
    }
    std::vector<RankReport> reports;  // every run's, added up
    if (durable) {
      const WindowRunner run_window = [&](const std::vector<Request>& window, const std::vector<OutputReading>& window_readings,
                                          const std::function<void(const RequestResult&)>& on_result,
                                          const std::function<bool()>& on_tick) {
        if (stream) stream->begin(window, window_readings);
        generation.on_result = on_result;
        generation.on_tick = on_tick;
        std::vector<RankReport> window_reports;
        std::vector<RequestResult> results = generate_spmd(model, topo, spmd.ep_comm(), spmd.role_comm(),
                                                           spmd.experts(), window, generation, &window_reports);
        if (stream) stream->end(results);
        add_reports(reports, window_reports);
        return results;
      };
      exit_code = run_durable_job(job, scan ? &*scan : nullptr, parse_line, world_comm,
                                  prompts->loaded_tokenizer(), run_window);
      spmd.finalize();
      if (world.rank() != 0) return;
      if (stream && exit_code == 0) stream->close();
      log_rank_reports(reports);
      spdlog::info("{} {} ({:.3f} s)", exit_code == 0 ? "wrote" : "stopped; resume with --resume:",
                   options.output_path, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return;
    }
    std::vector<RequestResult> results;
    // One engine for every wave, so that its prefix cache serves the continuations of what it computed.
    std::list<std::vector<Request>> waves;  // declared before the engine: it outlives it
    Engine engine(model, rank_engine_options(model, topo, spmd.experts(), generation));
    auto run_wave = [&](const std::vector<Request>& wave, const std::vector<int64_t>& original) {
      wave_original = &original;
      std::vector<RankReport> wave_reports;
      std::vector<RequestResult> wave_results = generate_spmd(engine, model, topo, spmd.ep_comm(), spmd.role_comm(),
                                                              spmd.experts(), wave, generation, &wave_reports);
      if (topo.world_rank() == 0) log_rank_reports(wave_reports);
      wave_original = nullptr;
      return wave_results;
    };
    if (stream) stream->begin(requests, readings);
    const bool continued =
        std::any_of(requests.begin(), requests.end(), [](const Request& r) { return r.continues >= 0; });
    if (continued) {
      results = generate_in_waves(requests, model.config(), engine_options, world_comm, waves, run_wave);
    } else {
      std::vector<int64_t> identity(requests.size());
      std::iota(identity.begin(), identity.end(), 0);
      results = run_wave(requests, identity);
    }
    spmd.finalize();
    if (world.rank() != 0) return;
    if (stream) {
      stream->end(results);
      stream->close();
    }
    write_results(options.output_path, results, prompts->loaded_tokenizer(), &readings, &formats, job.model_name);
    log_summary(results, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    spdlog::info("wrote {}", options.output_path);
  };
  const int code = run_spmd_command(world, prepare, execute);
  return code != 0 ? code : exit_code;
}

}  // namespace deepinfer::app
