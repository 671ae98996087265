// Online EPLB under skewed routing: a dummy model whose router bias makes every token pick experts 0-5.
// Greedy outputs with live rebalancing (and weight migration) equal the single-rank run, and the first
// rebalance takes the max/mean token load over the EP ranks from about 2 down to about 1.
#include <cstdlib>

#include "src/comm/mpi_communicator.h"
#include "src/comm/topology.h"
#include "src/engine/spmd_generation.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/moe/expert_parallel.h"
#include "tests/mp/mpi_test_util.h"

namespace deepinfer {
namespace {

constexpr int64_t kHotExperts = 6;

// Dummy weights of tests/fixtures/dummy-64-experts.json with a router bias that favours experts [0, 6).
WeightStore skewed_weights(const ModelConfig& config, const std::filesystem::path& path,
                           const WeightStore::TensorFilter& wanted) {
  WeightStore weights = WeightStore::load(config, path, LoadFormat::kDummy, 5, wanted);
  for (int64_t l = config.first_k_dense_replace; l < config.num_hidden_layers; ++l) {
    const std::string name = fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", l);
    Tensor bias = Tensor::zeros({config.n_routed_experts});
    for (int64_t e = 0; e < kHotExperts; ++e) bias.data<float>()[e] = 2.0f;
    weights.set(name, std::move(bias));
  }
  return weights;
}

std::vector<Request> requests_for(const ModelConfig& config) {
  std::vector<Request> requests;
  for (int64_t i = 0; i < 12; ++i) {
    Request r;
    r.index = i;
    r.id = i;
    for (int64_t t = 0; t < 5 + 7 * i; ++t) r.prompt_token_ids.push_back(static_cast<int32_t>(2 + (t * 31 + i * 7) % (config.vocab_size - 2)));
    r.max_new_tokens = 6 + i % 5;
    requests.push_back(std::move(r));
  }
  return requests;
}

TEST(EplbOnline, SkewedRoutingRebalancesLiveWithIdenticalOutputs) {
  const char* deploy_path = std::getenv("DEEPINFER_TEST_DEPLOY");
  ASSERT_NE(deploy_path, nullptr);
  const Deployment deployment = Deployment::from_toml_file(deploy_path);
  ASSERT_EQ(deployment.roles.size(), 1u) << "needs a colocated deployment";
  const auto path = std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests/fixtures/dummy-64-experts.json";
  const ModelConfig config = load_model_config(path);
  const std::vector<Request> requests = requests_for(config);

  // The reference: one rank, every expert local.
  DeepseekModel single(config, skewed_weights(config, path, nullptr));
  EngineOptions options;
  Engine engine(single, options);
  for (const Request& r : requests) engine.add_request(r);
  engine.run_to_completion();
  const std::vector<RequestResult> want = engine.results();

  Topology topo = Topology::create(deployment, MPI_COMM_WORLD);
  const int ep_rank = topo.placement().rank_in_ep_group;
  const int64_t ep_size = topo.role_spec().ep_size;
  ExpertPlacement placement = ExpertPlacement::make_default(config.num_hidden_layers - config.first_k_dense_replace,
                                                            config.n_routed_experts, ep_size,
                                                            config.n_routed_experts + 16);
  auto wanted = [&](const std::string& name) {
    int layer = -1, expert = -1;
    if (std::sscanf(name.c_str(), "model.layers.%d.mlp.experts.%d.", &layer, &expert) != 2) return true;
    return placement.rank_holds(ep_rank, layer - config.first_k_dense_replace, expert);
  };
  DeepseekModel model(config, skewed_weights(config, path, wanted));
  MpiCommunicator ep_comm(topo.ep_comm().get(), 120.0);
  MpiCommunicator role_comm(topo.role_comm().get(), 120.0);
  ExpertParallelDispatcher experts(ep_comm, placement, config.hidden_size, config.num_experts_per_tok, {.interval_steps = 3, .num_groups = config.n_group, .num_nodes = 1});
  SpmdGenerationOptions spmd;
  spmd.timeout_s = 120.0;
  const std::vector<RequestResult> got = generate_spmd(model, topo, ep_comm, role_comm, experts, requests, spmd, nullptr);
  if (topo.world_rank() == 0) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].output_token_ids, want[i].output_token_ids) << "request " << i;
  }
  ASSERT_FALSE(experts.rebalances().empty());
  const RebalanceReport& first = experts.rebalances().front();
  for (size_t l = 0; l < first.imbalance_before.size(); ++l) {
    EXPECT_GT(first.imbalance_before[l], 1.5) << "layer " << l;
    EXPECT_LT(first.imbalance_after[l], 1.1) << "layer " << l;
    if (topo.world_rank() == 0)
      std::printf("MoE layer %zu: max/mean load over %lld EP ranks %.2f -> %.2f at step %lld\n", l,
                  static_cast<long long>(ep_size), first.imbalance_before[l], first.imbalance_after[l],
                  static_cast<long long>(first.step));
  }
  EXPECT_TRUE(testing::all_ranks(!::testing::Test::HasFailure()));
  topo.finalize();
}

}  // namespace
}  // namespace deepinfer
