// `deepinfer generate --model M --input prompts.jsonl --output out.jsonl`: offline generation.
#include <spdlog/spdlog.h>

#include <chrono>

#include "src/app/jsonl.h"
#include "src/app/model_loading.h"
#include "src/app/spmd_command.h"
#include "src/engine/engine.h"

namespace deepinfer::app {

int run_generate(const GenerateOptions& options, MPI_Comm world) {
  std::unique_ptr<DeepseekModel> model;
  std::unique_ptr<Engine> engine;
  std::vector<Request> requests;
  auto prepare = [&] {
    require_single_rank(world, "generate");
    DI_INPUT_CHECK(options.kv_cache_tokens > 0 && options.max_running > 0 && options.chunk_tokens > 0,
                   "--kv-cache-tokens, --max-running and --chunk-tokens must be positive");
    requests = read_requests(options.input_path);
    model = load_model(options.model);
    EngineOptions engine_options;
    engine_options.kv_cache_tokens = options.kv_cache_tokens;
    engine_options.limits.max_running_sequences = options.max_running;
    engine_options.limits.max_step_tokens = options.chunk_tokens;
    engine = std::make_unique<Engine>(*model, engine_options);
    for (const Request& request : requests) engine->validate(request);
  };
  auto execute = [&] {
    const auto start = std::chrono::steady_clock::now();
    for (const Request& request : requests) engine->add_request(request);
    engine->run_to_completion();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<RequestResult> results = engine->results();
    write_results(options.output_path, results);

    const EngineStats& s = engine->stats();
    int64_t generated = 0;
    for (const RequestResult& r : results) generated += static_cast<int64_t>(r.output_token_ids.size());
    spdlog::info("{} requests: {} prompt tokens, {} generated tokens in {:.3f} s ({:.1f} generated tok/s); "
                 "prefill {:.1f} tok/s, decode {:.1f} tok/s over {} steps, {} preemptions; wrote {}",
                 results.size(), s.num_prefill_tokens, generated, seconds, generated / seconds,
                 s.num_prefill_tokens / std::max(s.prefill_s, 1e-9), s.num_decode_tokens / std::max(s.decode_s, 1e-9),
                 s.num_steps, engine->num_preemptions(), options.output_path);
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
