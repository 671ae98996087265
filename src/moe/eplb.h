// Expert-parallel load balancing (DeepSeek's public EPLB, reimplemented): given each layer's load per logical
// expert, choose num_replicas physical slots (redundant copies of hot experts) and place them on GPUs so that
// every GPU carries about the same load.
//  - hierarchical (num_groups % num_nodes == 0): pack expert groups onto nodes, replicate experts within each
//    node, then pack the node's replicas onto its GPUs;
//  - global otherwise: the same with one group and one node.
// Packing: items heaviest first, each to the lightest pack that has room (ties to the lowest pack index).
// Replication: each extra slot to the expert with the largest load per replica (ties to the lowest index).
// Pure bookkeeping: no MPI, no CUDA.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct EplbPlan {
  std::vector<std::vector<int32_t>> phy2log;               // [layer][slot] -> logical expert
  std::vector<std::vector<std::vector<int32_t>>> log2phy;  // [layer][expert][replica] -> slot, -1 padded
  std::vector<std::vector<int32_t>> logcnt;                // [layer][expert] -> number of replicas
};

// Throws InputError when the shape does not allow a plan: num_experts % num_groups, num_groups % num_nodes
// (hierarchical), num_gpus % num_nodes, num_replicas % num_gpus, num_replicas >= num_experts.
EplbPlan rebalance_experts(const std::vector<std::vector<double>>& weight, int64_t num_replicas, int64_t num_groups,
                           int64_t num_nodes, int64_t num_gpus);

// max over GPUs / mean over GPUs of the load a layer puts on them under `phy2log` (each expert's load split
// evenly over its replicas; GPU g holds slots [g * S, (g + 1) * S)).
double gpu_imbalance(const std::vector<double>& layer_weight, const std::vector<int32_t>& phy2log, int64_t num_gpus);

}  // namespace deepinfer
