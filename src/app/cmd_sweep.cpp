// `deepinfer sweep prefill|decode --model M --deploy D --points ... --output F.h5`: Pareto points to HDF5.
#include <nlohmann/json.hpp>

#include <optional>

#include "src/app/commands.h"
#include "src/app/spmd_command.h"
#include "src/app/spmd_setup.h"
#include "src/bench/sweep.h"
#include "src/core/files.h"

namespace deepinfer::app {

int run_sweep(const SweepCliOptions& options, const World& world) {
  const SweepOptions& run = options.run;
  SpmdSetup spmd;
  SweepOptions sweep;
  std::optional<SyntheticRouting> routing;
  auto prepare = [&] {
    DI_INPUT_CHECK(!run.points.empty(), "--points is empty");
    // Decode points are requests per rank (each a KV cache of --context tokens); prefill points are tokens
    // per step.
    const int64_t max_point = run.phase == "decode" ? 65536 : int64_t{1} << 24;
    for (int64_t p : run.points)
      DI_INPUT_CHECK(p > 0 && p <= max_point, "--points: {} is outside [1, {}] ({} per {} rank)", p, max_point,
                     run.phase == "decode" ? "requests" : "tokens a step", run.phase);
    check_output_path(run.output_path, "--output",
                      input_files(options.model.model_path, {options.deploy_path, options.expert_plan_path}),
                      /*allow_special=*/false);
    DI_INPUT_CHECK(run.steps > 0 && run.warmup >= 0, "--steps must be positive and --warmup not negative");
    spmd.prepare(options.model,
                 {options.deploy_path, std::nullopt, options.expert_plan_path, 0, -1, !options.routing.empty()}, world);
    if (!options.routing.empty()) {  // made here, where a bad spec is every rank's input error
      const ModelConfig& c = spmd.config();
      routing.emplace(options.routing, options.routing_seed, c.num_hidden_layers - c.first_k_dense_replace,
                      c.n_routed_experts, c.num_experts_per_tok);
    }
    const int64_t longest =
        run.phase == "decode"
            ? run.context + (run.warmup + run.steps + 2) * (run.spec_measured ? 1 + run.num_drafts : 1)
            : std::min(run.prompt_len, *std::max_element(run.points.begin(), run.points.end()));
    DI_INPUT_CHECK(longest <= spmd.config().max_position_embeddings,
                   "a sweep sequence of {} tokens exceeds the model's {} positions", longest,
                   spmd.config().max_position_embeddings);
    DI_INPUT_CHECK(!run.spec_measured || (run.phase == "decode" && run.num_drafts > 0 &&
                                                  run.acceptance > 0 && run.acceptance < 1),
                   "--spec-measured needs sweep decode with --nextn N (N > 0) and --acceptance in (0, 1)");
    sweep = run;
    sweep.attributes_json = nlohmann::json{{"model", options.model.model_path},
                                           {"load_format", options.model.load_format},
                                           {"device", options.model.device},
                                           {"seed", options.model.seed},
                                           {"deploy", options.deploy_path},
                                           {"expert_plan", options.expert_plan_path},
                                           {"points", run.points},
                                           {"prompt_len", run.prompt_len},
                                           {"context", run.context},
                                           {"warmup", run.warmup},
                                           {"steps", run.steps},
                                           {"nextn", run.num_drafts},
                                           {"acceptance", run.acceptance},
                                           {"spec_measured", run.spec_measured},
                                           {"draft_spread", run.draft_spread},
                                           {"routing", options.routing.empty() ? "router" : options.routing},
                                           {"routing_seed", options.routing_seed}}
                                .dump();
  };
  auto execute = [&] {
    spmd.start(world);
    if (routing) spmd.experts().set_synthetic_routing(std::move(*routing));
    run_sweep(spmd.model(), spmd.topology(), spmd.experts(), sweep);
    spmd.finalize();
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
