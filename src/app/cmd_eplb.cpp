// `deepinfer eplb plan --weights W.json --num-replicas R --num-groups G --num-nodes N --num-gpus P --output
// plan.json`: a placement plan from measured expert loads; the plan loads with `generate --expert-plan`.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "src/app/commands.h"
#include "src/app/spmd_command.h"
#include "src/core/check.h"
#include "src/core/json_depth.h"
#include "src/core/files.h"
#include "src/moe/eplb.h"

namespace deepinfer::app {

int run_eplb_plan(const EplbPlanOptions& options, const World& world) {
  std::vector<std::vector<double>> weight;
  EplbPlan plan;
  auto prepare = [&] {
    check_output_path(options.output_path, "--output", {options.weights_path});
    const std::string text = read_text_file(options.weights_path, "--weights");
    check_json_file_depth(text, options.weights_path);
    try {
      weight = nlohmann::json::parse(text).at("weight").get<std::vector<std::vector<double>>>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: expected {{\"weight\": [[...], ...]}}: {}", options.weights_path, e.what()));
    }
    plan = rebalance_experts(weight, options.num_replicas, options.num_groups, options.num_nodes, options.num_gpus);
  };
  auto execute = [&] {
    if (world.rank() != 0) return;
    const auto num_experts = static_cast<int64_t>(weight[0].size());
    for (size_t l = 0; l < weight.size(); ++l) {
      // "Before": each expert once, E / gpus per GPU in order (only defined when that divides).
      std::string before = "n/a";
      if (num_experts % options.num_gpus == 0) {
        std::vector<int32_t> plain(num_experts);
        for (int64_t e = 0; e < num_experts; ++e) plain[e] = static_cast<int32_t>(e);
        before = fmt::format("{:.3f}", gpu_imbalance(weight[l], plain, options.num_gpus));
      }
      spdlog::info("layer {}: GPU load max/mean {} without replicas -> {:.3f} with the plan", l, before,
                   gpu_imbalance(weight[l], plan.phy2log[l], options.num_gpus));
    }
    const nlohmann::json json = {{"phy2log", plan.phy2log}, {"log2phy", plan.log2phy}, {"logcnt", plan.logcnt}};
    write_file_whole(options.output_path, json.dump() + "\n");
    spdlog::info("wrote {}", options.output_path);
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
