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
  SpmdSetup spmd;
  SweepOptions sweep;
  std::optional<SyntheticRouting> routing;
  auto prepare = [&] {
    DI_INPUT_CHECK(!options.points.empty(), "--points is empty");
    // Decode points are requests per rank (each a KV cache of --context tokens); prefill points are tokens
    // per step.
    const int64_t max_point = options.phase == "decode" ? 65536 : int64_t{1} << 24;
    for (int64_t p : options.points)
      DI_INPUT_CHECK(p > 0 && p <= max_point, "--points: {} is outside [1, {}] ({} per {} rank)", p, max_point,
                     options.phase == "decode" ? "requests" : "tokens a step", options.phase);
    check_output_path(options.output_path, "--output",
                      input_files(options.model.model_path, {options.deploy_path, options.expert_plan_path}),
                      /*allow_special=*/false);
    DI_INPUT_CHECK(options.steps > 0 && options.warmup >= 0, "--steps must be positive and --warmup not negative");
    spmd.prepare(options.model,
                 {options.deploy_path, std::nullopt, options.expert_plan_path, 0, -1, !options.routing.empty()}, world);
    if (!options.routing.empty()) {  // made here, where a bad spec is every rank's input error
      const ModelConfig& c = spmd.config();
      routing.emplace(options.routing, options.routing_seed, c.num_hidden_layers - c.first_k_dense_replace,
                      c.n_routed_experts, c.num_experts_per_tok);
    }
    const int64_t longest = options.phase == "decode" ? options.context + (options.warmup + options.steps + 2) *
                                                                              (options.spec_measured ? 1 + options.nextn : 1)
                                                      : std::min(options.prompt_len, *std::max_element(
                                                                                         options.points.begin(),
                                                                                         options.points.end()));
    DI_INPUT_CHECK(longest <= spmd.config().max_position_embeddings,
                   "a sweep sequence of {} tokens exceeds the model's {} positions", longest,
                   spmd.config().max_position_embeddings);
    sweep.phase = options.phase;
    sweep.points = options.points;
    sweep.prompt_len = options.prompt_len;
    sweep.context = options.context;
    sweep.warmup = options.warmup;
    sweep.steps = options.steps;
    sweep.nextn = options.nextn;
    sweep.acceptance = options.acceptance;
    DI_INPUT_CHECK(!options.spec_measured || (options.phase == "decode" && options.nextn > 0 &&
                                              options.acceptance > 0 && options.acceptance < 1),
                   "--spec-measured needs sweep decode with --nextn N (N > 0) and --acceptance in (0, 1)");
    sweep.spec_measured = options.spec_measured;
    sweep.draft_spread = options.draft_spread;
    sweep.output_path = options.output_path;
    sweep.attributes_json = nlohmann::json{{"model", options.model.model_path},
                                           {"load_format", options.model.load_format},
                                           {"device", options.model.device},
                                           {"seed", options.model.seed},
                                           {"deploy", options.deploy_path},
                                           {"expert_plan", options.expert_plan_path},
                                           {"points", options.points},
                                           {"prompt_len", options.prompt_len},
                                           {"context", options.context},
                                           {"warmup", options.warmup},
                                           {"steps", options.steps},
                                           {"nextn", options.nextn},
                                           {"acceptance", options.acceptance},
                                           {"spec_measured", options.spec_measured},
                                           {"draft_spread", options.draft_spread},
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
