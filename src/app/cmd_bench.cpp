// `deepinfer bench decode|prefill`: median step times on one rank against their floors.
#include <spdlog/spdlog.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "src/app/model_loading.h"
#include "src/app/spmd_command.h"
#include "src/bench/step_bench.h"

namespace deepinfer::app {

int run_bench(const BenchOptions& options, MPI_Comm world) {
  LoadedModel loaded;
  auto prepare = [&] {
    require_single_rank(world, "bench");
    DI_INPUT_CHECK(options.steps > 0 && options.warmup >= 0, "--steps must be positive and --warmup not negative");
    loaded = load_model(options.model);
  };
  auto execute = [&] {
    const std::unique_ptr<CausalLm> model = build_model(std::move(loaded), 0);
    std::vector<StepBenchResult> results;
    auto report = [&](const StepBenchResult& r) {
      spdlog::info("{} batch {:>4} x {:>5}: {:>9.3f} ms/step (p90 {:.3f}), {:>10.1f} tok/s; floor {:.3f} ms, "
                   "floor/measured {:.3f}", r.phase, r.batch, r.context, r.median_ms, r.p90_ms, r.tokens_per_s,
                   r.floor_ms, r.floor_over_measured);
      results.push_back(r);
      if (!options.output_path.empty()) {
        std::ofstream out(options.output_path, std::ios::app);
        out << nlohmann::json{{"phase", r.phase}, {"batch", r.batch}, {"context", r.context},
                              {"tokens_per_step", r.tokens_per_step}, {"median_ms", r.median_ms}, {"p90_ms", r.p90_ms},
                              {"min_ms", r.min_ms}, {"tokens_per_s", r.tokens_per_s}, {"floor_ms", r.floor_ms},
                              {"floor_over_measured", r.floor_over_measured}, {"steps", r.steps},
                              {"model", options.model.model_path}, {"device", options.model.device}}
                   .dump()
            << '\n';
      }
    };
    if (options.phase == "decode") {
      for (int64_t context : options.contexts)
        for (int64_t batch : options.batches) report(bench_decode(*model, batch, context, options.warmup, options.steps));
    } else {
      for (int64_t chunk : options.chunks)
        report(bench_prefill(*model, chunk, options.prompt_len, options.warmup, options.steps));
    }
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
