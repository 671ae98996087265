// What `generate --deploy` and `sweep` share: in prepare() (local), the deployment, this rank's expert
// placement and its share of the weights; in execute() (collective), the topology, the model on this rank's
// GPU, the EP communicator (NCCL when every rank of the group has a GPU of its own, else MPI) and the
// expert-parallel dispatcher. finalize() tears the collective parts down in order.
#pragma once

#include <memory>
#include <optional>

#include "src/app/model_loading.h"
#include "src/comm/mpi_communicator.h"
#include "src/comm/topology.h"
#include "src/moe/expert_parallel.h"
#ifdef DEEPINFER_HAVE_CUDA
#include "src/comm/nccl_communicator.h"
#endif

namespace deepinfer::app {

struct SpmdSetupOptions {
  std::string deploy_path;  // empty: `deployment` below
  std::optional<Deployment> deployment;
  std::string expert_plan_path;
  int64_t eplb_interval = -1;      // -1: the deployment's
  int64_t redundant_experts = -1;  // -1: the deployment's
  bool host_exchange = false;      // the EP exchange over MPI host memory even where NCCL could carry it
};

// The expert placement of an EP group of role `spec` (its redundant slots unless `redundant_experts` >= 0, or the
// plan file's), as each of its ranks builds it. InputError for a plan or a redundancy that does not fit.
ExpertPlacement group_placement(const ModelConfig& config, const RoleSpec& spec, int64_t redundant_experts,
                                const std::string& expert_plan_path);

class SpmdSetup {
 public:
  // Local: throws InputError for a deployment that does not fit the world, a plan that does not fit, a bad model.
  void prepare(const ModelOptions& model, const SpmdSetupOptions& options, const World& world);
  // Collective over the world.
  void start(const World& world);
  void finalize();

  const Deployment& deployment() const { return *deployment_; }
  const ModelConfig& config() const { return loaded_.config; }
  // After prepare(), before start(): the backend the model will run on.
  Device device() const { return loaded_.device; }
  // Whether the weights come from a checkpoint or the CPU's dummy values (not the GPU's generated ones), and
  // whether they hold `name`.
  bool has_loaded_weights() const { return loaded_.weights.host != nullptr || loaded_.weights.checkpoint != nullptr; }
  bool has_loaded_weight(const std::string& name) const { return loaded_.weights.holds(name); }
  Topology& topology() { return *topology_; }
  CausalLm& model() { return *model_; }
  Communicator& ep_comm() { return *ep_comm_; }
  Communicator& role_comm() { return *role_comm_; }
  ExpertParallelDispatcher& experts() { return *experts_; }

 private:
  std::optional<Deployment> deployment_;
  std::optional<ExpertPlacement> placement_;
  EplbOptions eplb_;
  bool host_exchange_ = false;
  LoadedModel loaded_;
  std::optional<Topology> topology_;
  std::unique_ptr<CausalLm> model_;
  std::unique_ptr<MpiCommunicator> mpi_ep_comm_;
  std::unique_ptr<MpiCommunicator> role_comm_;
#ifdef DEEPINFER_HAVE_CUDA
  std::unique_ptr<NcclCommunicator> nccl_ep_comm_;
  std::unique_ptr<HostStagedCommunicator> staged_ep_comm_;
#endif
  Communicator* ep_comm_ = nullptr;
  std::unique_ptr<ExpertParallelDispatcher> experts_;
};

}  // namespace deepinfer::app
