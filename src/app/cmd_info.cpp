// `deepinfer info --deploy FILE`: one row per rank — its role, its groups, its GPU and its host.
#include <fmt/format.h>

#include <optional>

#include "src/app/commands.h"
#include "src/app/spmd_command.h"
#include "src/comm/mpi_util.h"
#include "src/comm/topology.h"

namespace deepinfer::app {

namespace {

constexpr std::string_view kRowFormat = "{:>5}  {:<9}  {:>8}  {:>8}  {:>7}  {:>10}  {:<6}  {:<16}  {:>5}  {:>4}  {:>3}  {:>5}";

std::string describe(const Deployment& deployment) {
  std::string text = fmt::format("deployment '{}': {} ranks =", deployment.name, deployment.world_size());
  for (size_t idx = 0; idx < deployment.roles.size(); ++idx) {
    const RoleSpec& spec = deployment.roles[idx];
    text += fmt::format("{} {} {} ({} EP group{} of {}, chunk {} tokens, {} requests/rank)", idx ? " +" : "",
                        spec.num_ranks, role_name(spec.role), spec.num_ep_groups(),
                        spec.num_ep_groups() == 1 ? "" : "s", spec.ep_size, spec.chunk_tokens,
                        spec.max_running);
  }
  return text;
}

}  // namespace

int run_info(const InfoOptions& options, const World& world) {
  std::optional<Deployment> deployment;
  auto prepare = [&] {
    deployment = Deployment::from_toml_file(options.deploy_path);
    Topology::check_world_size(*deployment, world.size());
  };
  auto execute = [&] {
    Topology topo = Topology::create(*deployment, world.comm());
    const RankPlacement& where = topo.placement();
    const std::string row = fmt::format(
        fmt::runtime(kRowFormat), topo.world_rank(), role_name(topo.role()), where.rank_in_role,
        where.ep_group_idx, where.rank_in_ep_group, topo.local_rank(),
        topo.gpu() < 0 ? "none" : fmt::format("cuda:{}", topo.gpu()), topo.host(), topo.world_size(),
        topo.role_comm().size(), topo.ep_comm().size(), topo.local_comm().size());
    const std::vector<std::string> rows = gather_strings(world.comm(), row);
    if (topo.world_rank() == 0) {
      fmt::print("{}\n", describe(*deployment));
      fmt::print(fmt::runtime(kRowFormat), "rank", "role", "role_idx", "ep_group", "ep_rank", "local_rank",
                 "gpu", "host", "world", "role", "ep", "local");
      fmt::print("\n");
      for (const std::string& line : rows) fmt::print("{}\n", line);
      std::fflush(stdout);
    }
    topo.finalize();
  };
  return run_spmd_command(world, prepare, execute);
}

}  // namespace deepinfer::app
