#include "src/moe/eplb.h"

#include <algorithm>
#include <numeric>

#include "src/core/check.h"

namespace deepinfer {

namespace {

using Matrix = std::vector<std::vector<double>>;
using IndexMatrix = std::vector<std::vector<int32_t>>;

// Per row: pack[i] and rank_in_pack[i] of each item, num_packs packs of n / num_packs items each. One item a pack:
// item i in pack i, as DeepSeek's eplb.py does (groups_per_pack == 1 keeps the order), not by weight.
void balanced_packing(const Matrix& weight, int64_t num_packs, IndexMatrix& pack, IndexMatrix& rank_in_pack) {
  pack.assign(weight.size(), {});
  rank_in_pack.assign(weight.size(), {});
  for (size_t row = 0; row < weight.size(); ++row) {
    const auto& w = weight[row];
    const auto n = static_cast<int64_t>(w.size());
    const int64_t per_pack = n / num_packs;
    pack[row].assign(n, -1);
    rank_in_pack[row].assign(n, -1);
    if (per_pack == 1) {
      std::iota(pack[row].begin(), pack[row].end(), 0);
      std::fill(rank_in_pack[row].begin(), rank_in_pack[row].end(), 0);
      continue;
    }
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[a] > w[b]; });
    std::vector<double> pack_weight(num_packs, 0.0);
    std::vector<int64_t> pack_items(num_packs, 0);
    for (int32_t item : order) {
      int64_t best = -1;
      for (int64_t p = 0; p < num_packs; ++p)
        if (pack_items[p] < per_pack && (best < 0 || pack_weight[p] < pack_weight[best])) best = p;
      pack[row][item] = static_cast<int32_t>(best);
      rank_in_pack[row][item] = static_cast<int32_t>(pack_items[best]);
      pack_weight[best] += w[item];
      ++pack_items[best];
    }
  }
}

// Per row: num_phy slots for the row's experts; slot i < num_log is expert i, the rest go one by one to the
// expert with the largest load per replica.
void replicate_experts(const Matrix& weight, int64_t num_phy, IndexMatrix& phy2log, IndexMatrix& rank,
                       IndexMatrix& logcnt) {
  phy2log.assign(weight.size(), {});
  rank.assign(weight.size(), {});
  logcnt.assign(weight.size(), {});
  for (size_t row = 0; row < weight.size(); ++row) {
    const auto num_log = static_cast<int64_t>(weight[row].size());
    phy2log[row].resize(num_phy);
    rank[row].assign(num_phy, 0);
    logcnt[row].assign(num_log, 1);
    for (int64_t i = 0; i < num_log; ++i) phy2log[row][i] = static_cast<int32_t>(i);
    for (int64_t i = num_log; i < num_phy; ++i) {
      int64_t best = 0;
      for (int64_t e = 1; e < num_log; ++e)
        if (weight[row][e] / logcnt[row][e] > weight[row][best] / logcnt[row][best]) best = e;
      phy2log[row][i] = static_cast<int32_t>(best);
      rank[row][i] = logcnt[row][best];
      ++logcnt[row][best];
    }
  }
}

std::vector<int32_t> inverse(const std::vector<int32_t>& perm) {
  std::vector<int32_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int32_t>(i);
  return inv;
}

void rebalance_hierarchical(const Matrix& weight, int64_t num_phy, int64_t num_groups, int64_t num_nodes,
                            int64_t num_gpus, IndexMatrix& out_phy2log, IndexMatrix& out_rank, IndexMatrix& out_logcnt) {
  const auto num_layers = static_cast<int64_t>(weight.size());
  const auto num_log = static_cast<int64_t>(weight[0].size());
  const int64_t group_size = num_log / num_groups;
  const int64_t groups_per_node = num_groups / num_nodes;
  const int64_t log_per_node = num_log / num_nodes;
  const int64_t phy_per_node = num_phy / num_nodes;
  const int64_t phy_per_gpu = num_phy / num_gpus;
  const int64_t gpus_per_node = num_gpus / num_nodes;

  // Step 1: groups onto nodes. log2mlog maps a logical expert to its "node-major" index.
  Matrix group_weight(num_layers, std::vector<double>(num_groups, 0.0));
  for (int64_t l = 0; l < num_layers; ++l)
    for (int64_t e = 0; e < num_log; ++e) group_weight[l][e / group_size] += weight[l][e];
  IndexMatrix group_pack, group_rank;
  balanced_packing(group_weight, num_nodes, group_pack, group_rank);
  IndexMatrix log2mlog(num_layers, std::vector<int32_t>(num_log)), mlog2log(num_layers);
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t e = 0; e < num_log; ++e) {
      const int64_t g = e / group_size;
      log2mlog[l][e] = static_cast<int32_t>((group_pack[l][g] * groups_per_node + group_rank[l][g]) * group_size + e % group_size);
    }
    mlog2log[l] = inverse(log2mlog[l]);
  }

  // Step 2: replicas within each node (rows are (layer, node)).
  Matrix node_weight(num_layers * num_nodes, std::vector<double>(log_per_node));
  for (int64_t l = 0; l < num_layers; ++l)
    for (int64_t m = 0; m < num_log; ++m) node_weight[l * num_nodes + m / log_per_node][m % log_per_node] = weight[l][mlog2log[l][m]];
  IndexMatrix phy2mlog, phy_rank, mlogcnt;
  replicate_experts(node_weight, phy_per_node, phy2mlog, phy_rank, mlogcnt);

  // Step 3: each node's replicas onto its GPUs.
  Matrix phy_weight(node_weight.size(), std::vector<double>(phy_per_node));
  for (size_t row = 0; row < node_weight.size(); ++row)
    for (int64_t p = 0; p < phy_per_node; ++p)
      phy_weight[row][p] = node_weight[row][phy2mlog[row][p]] / mlogcnt[row][phy2mlog[row][p]];
  IndexMatrix gpu_pack, gpu_rank;
  balanced_packing(phy_weight, gpus_per_node, gpu_pack, gpu_rank);

  out_phy2log.assign(num_layers, std::vector<int32_t>(num_phy));
  out_rank.assign(num_layers, std::vector<int32_t>(num_phy));
  out_logcnt.assign(num_layers, std::vector<int32_t>(num_log));
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t node = 0; node < num_nodes; ++node) {
      const int64_t row = l * num_nodes + node;
      std::vector<int32_t> phy2pphy(phy_per_node);
      for (int64_t p = 0; p < phy_per_node; ++p) phy2pphy[p] = static_cast<int32_t>(gpu_pack[row][p] * phy_per_gpu + gpu_rank[row][p]);
      const std::vector<int32_t> pphy2phy = inverse(phy2pphy);
      for (int64_t q = 0; q < phy_per_node; ++q) {
        const int32_t phy = pphy2phy[q];
        const int64_t mlog = phy2mlog[row][phy] + node * log_per_node;
        out_phy2log[l][node * phy_per_node + q] = mlog2log[l][mlog];
        out_rank[l][node * phy_per_node + q] = phy_rank[row][phy];
      }
    }
    for (int64_t e = 0; e < num_log; ++e) {
      const int64_t mlog = log2mlog[l][e];
      out_logcnt[l][e] = mlogcnt[l * num_nodes + mlog / log_per_node][mlog % log_per_node];
    }
  }
}

}  // namespace

EplbPlan rebalance_experts(const std::vector<std::vector<double>>& weight, int64_t num_replicas, int64_t num_groups,
                           int64_t num_nodes, int64_t num_gpus) {
  DI_INPUT_CHECK(!weight.empty() && !weight[0].empty(), "EPLB needs at least one layer of expert loads");
  const auto num_log = static_cast<int64_t>(weight[0].size());
  for (const auto& row : weight)
    DI_INPUT_CHECK(static_cast<int64_t>(row.size()) == num_log, "EPLB: every layer needs {} expert loads", num_log);
  DI_INPUT_CHECK(num_groups > 0 && num_nodes > 0 && num_gpus > 0, "EPLB: groups, nodes and GPUs must be positive");
  DI_INPUT_CHECK(num_log % num_groups == 0, "EPLB: {} experts do not split into {} groups", num_log, num_groups);
  DI_INPUT_CHECK(num_gpus % num_nodes == 0, "EPLB: {} GPUs do not split over {} nodes", num_gpus, num_nodes);
  DI_INPUT_CHECK(num_replicas % num_gpus == 0, "EPLB: {} replicas do not split over {} GPUs", num_replicas, num_gpus);
  DI_INPUT_CHECK(num_replicas >= num_log, "EPLB: {} replicas cannot hold {} experts", num_replicas, num_log);
  const bool hierarchical = num_groups % num_nodes == 0;
  IndexMatrix phy2log, rank, logcnt;
  if (hierarchical) rebalance_hierarchical(weight, num_replicas, num_groups, num_nodes, num_gpus, phy2log, rank, logcnt);
  else rebalance_hierarchical(weight, num_replicas, 1, 1, num_gpus, phy2log, rank, logcnt);

  EplbPlan plan;
  plan.phy2log = phy2log;
  plan.logcnt = logcnt;
  const int64_t max_count = num_replicas - num_log + 1;
  plan.log2phy.assign(weight.size(), std::vector<std::vector<int32_t>>(num_log, std::vector<int32_t>(max_count, -1)));
  for (size_t l = 0; l < weight.size(); ++l)
    for (int64_t s = 0; s < num_replicas; ++s) plan.log2phy[l][phy2log[l][s]][rank[l][s]] = static_cast<int32_t>(s);
  return plan;
}

double gpu_imbalance(const std::vector<double>& layer_weight, const std::vector<int32_t>& phy2log, int64_t num_gpus) {
  std::vector<int64_t> count(layer_weight.size(), 0);
  for (int32_t e : phy2log) ++count[e];
  const int64_t per_gpu = static_cast<int64_t>(phy2log.size()) / num_gpus;
  std::vector<double> load(num_gpus, 0.0);
  for (size_t s = 0; s < phy2log.size(); ++s) load[s / per_gpu] += layer_weight[phy2log[s]] / count[phy2log[s]];
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / num_gpus;
  return mean > 0 ? *std::max_element(load.begin(), load.end()) / mean : 1.0;
}

}  // namespace deepinfer
