#include "src/app/spmd_setup.h"

#include <spdlog/spdlog.h>

#ifdef DEEPINFER_HAVE_CUDA
#include "src/moe/nccl_expert_dispatch.h"
#endif

namespace deepinfer::app {

ExpertPlacement group_placement(const ModelConfig& config, const RoleSpec& spec, int64_t redundant_experts,
                                const std::string& expert_plan_path) {
  DI_INPUT_CHECK(config.n_routed_experts > 0, "the engine serves MoE models (n_routed_experts > 0)");
  const int64_t num_moe_layers = config.num_hidden_layers - config.first_k_dense_replace;
  const int64_t redundant = redundant_experts >= 0 ? redundant_experts : spec.redundant_experts;
  // A replica beyond one copy of every expert on every rank of the group holds nothing new, and each costs an
  // expert's weights on its rank: more is a mistake, not a plan.
  const int64_t max_redundant = config.n_routed_experts * (spec.ep_size - 1);
  DI_INPUT_CHECK(redundant >= 0 && redundant <= max_redundant,
                 "redundant_experts = {} is more than the {} an EP group of {} can use (every rank holding all {} "
                 "experts)", redundant, max_redundant, spec.ep_size, config.n_routed_experts);
  return expert_plan_path.empty()
             ? ExpertPlacement::make_default(num_moe_layers, config.n_routed_experts, spec.ep_size,
                                             config.n_routed_experts + redundant)
             : ExpertPlacement::from_plan_file(expert_plan_path, num_moe_layers, config.n_routed_experts, spec.ep_size);
}

void SpmdSetup::prepare(const ModelOptions& model, const SpmdSetupOptions& options, const World& world) {
  const std::filesystem::path model_path(model.model_path);
  DI_INPUT_CHECK(std::filesystem::exists(model_path), "--model '{}' does not exist", model_path.string());
  const ModelConfig config = load_model_config(model_path);
  deployment_ = options.deploy_path.empty() ? *options.deployment : Deployment::from_toml_file(options.deploy_path);
  Topology::check_world_size(*deployment_, world.size());
  const RankPlacement where = place_rank(*deployment_, world.rank());
  const RoleSpec& spec = deployment_->roles[where.role_spec_idx];
  placement_ = group_placement(config, spec, options.redundant_experts, options.expert_plan_path);
  host_exchange_ = options.host_exchange;
  eplb_.interval_steps = options.eplb_interval >= 0 ? options.eplb_interval : spec.eplb_interval;
  eplb_.num_groups = config.n_group;
  // The attention and dense weights, only the routed experts this rank's slots hold, and (--engram-split group)
  // this rank's part of the engram tables' rows.
  const RowShard engram_shard = model.engram_split == "group" ? RowShard{where.rank_in_ep_group, spec.ep_size}
                                                              : RowShard{};
  loaded_ = load_model(model, weights_held_by(*placement_, where.rank_in_ep_group, config), engram_shard);
  loaded_.config.expert_slots_per_rank = placement_->slots_per_rank();
  const V41TextConfig& v = loaded_.config.v41;
  if (world.rank() == 0 && !v.engram_layer_ids.empty()) {
    double rows = 0;
    for (const int64_t n : v.engram_num_embeddings) rows += static_cast<double>(n);
    spdlog::info("engram tables: {} rows of {} over {} layers, {} (rank 0's EP group: {} rank{}, {:.0f} rows each)",
                 rows, v.engram_head_dim, v.engram_layer_ids.size(),
                 v.engram_shard.whole() ? "whole on every rank" : "split by rows across each EP group's ranks",
                 spec.ep_size, spec.ep_size == 1 ? "" : "s", rows / static_cast<double>(v.engram_shard.parts));
  }
}

void SpmdSetup::start(const World& world) {
  topology_ = Topology::create(*deployment_, world.comm());
  const bool on_gpu = loaded_.device == Device::kCuda;
  model_ = build_model(std::move(loaded_), std::max(topology_->gpu(), 0));
  mpi_ep_comm_ = std::make_unique<MpiCommunicator>(topology_->ep_comm().get());
  role_comm_ = std::make_unique<MpiCommunicator>(topology_->role_comm().get());
  ep_comm_ = mpi_ep_comm_.get();
  std::string reason = on_gpu ? "" : "the model runs on the CPU";
#ifdef DEEPINFER_HAVE_CUDA
  if (host_exchange_) reason = "synthetic routing is drawn in the host exchange";
  else if (on_gpu && choose_transport(topology_->ep_comm().get(), topology_->gpu(), topology_->host(), &reason) ==
                    Transport::kNccl) {
    nccl_ep_comm_ = std::make_unique<NcclCommunicator>(topology_->ep_comm().get());
    staged_ep_comm_ = std::make_unique<HostStagedCommunicator>(*nccl_ep_comm_);
    ep_comm_ = staged_ep_comm_.get();
  }
  const bool nccl = nccl_ep_comm_ != nullptr;
#else
  const bool nccl = false;
  if (on_gpu) reason = "no CUDA build";
#endif
  if (topology_->world_rank() == 0)
    spdlog::info("expert-parallel transport: {} ({})", nccl ? "NCCL" : "MPI over host memory", reason);
  const ModelConfig& c = model_->config();
  experts_ = std::make_unique<ExpertParallelDispatcher>(*ep_comm_, *placement_, c.hidden_size, c.num_experts_per_tok,
                                                        eplb_);
#ifdef DEEPINFER_HAVE_CUDA
  // Routed rows go GPU to GPU; the host-staged communicator still carries EPLB's expert moves.
  if (nccl) {
    experts_->attach_device(
        std::make_unique<NcclExpertDispatch>(*nccl_ep_comm_, c.n_routed_experts, c.hidden_size, c.num_experts_per_tok));
  }
#endif
  // --batch-invariant: each entry's expert output comes back and is summed in k order, as at one rank.
  if (c.batch_invariant) experts_->set_pair_outputs(true);
}

void SpmdSetup::finalize() {
#ifdef DEEPINFER_HAVE_CUDA
  if (nccl_ep_comm_) nccl_ep_comm_->finalize();
#endif
  if (topology_) topology_->finalize();
}

}  // namespace deepinfer::app
