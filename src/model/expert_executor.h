// How the MoE block reaches its routed experts. The model routes tokens (top-k logical experts and weights)
// and adds the shared experts; an ExpertExecutor adds the routed part:
//   out[t] += sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t])
// LocalExpertExecutor computes every expert on this rank; moe/'s ExpertParallelExecutor sends tokens to the
// ranks that own their experts and back. Every rank of an expert-parallel group calls run() for every MoE
// layer of every step, with zero tokens if it has none.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace deepinfer {

class CausalLm;

// What an expert-parallel executor moved, counted on each rank.
struct ExchangeStats {
  int64_t num_exchanges = 0;      // MoE layer calls
  int64_t dispatch_bytes = 0;     // bytes this rank sent to other ranks in dispatch (records, not counts)
  int64_t combine_bytes = 0;      // bytes this rank sent to other ranks in combine
  int64_t tokens_sent = 0;        // token copies sent to other ranks
  int64_t tokens_received = 0;    // token copies received from any rank (itself included)

  ExchangeStats& operator+=(const ExchangeStats& o) {
    num_exchanges += o.num_exchanges;
    dispatch_bytes += o.dispatch_bytes;
    combine_bytes += o.combine_bytes;
    tokens_sent += o.tokens_sent;
    tokens_received += o.tokens_received;
    return *this;
  }
};

// The device-resident form of an expert-parallel exchange (CUDA builds with NCCL): the routed rows stay on
// the GPU and go GPU to GPU. Rows are bf16 device buffers; ids and weights are device int32 / float.
class DeviceExpertExecutor {
 public:
  virtual ~DeviceExpertExecutor() = default;
  // The model's own routed-expert pass over rows received from the group:
  //   y[i] = sum over k with ids[i, k] < num_experts of weights[i, k] * expert_{ids[i, k]}(x[i])
  // (ids equal to num_experts mark entries served elsewhere).
  using LocalExperts = std::function<void(const void* x, const int32_t* ids, const float* weights, int64_t rows,
                                          void* y)>;
  // out[t] += sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]), on the calling thread's default stream.
  virtual void run(int64_t moe_layer_idx, const void* x, const int32_t* topk_ids, const float* topk_weights,
                   int64_t num_tokens, void* out, const LocalExperts& local_experts) = 0;
  // phy2log[layer][slot]; rank r owns slots [r * slots_per_rank, (r + 1) * slots_per_rank). Not collective.
  virtual void set_placement(const std::vector<std::vector<int32_t>>& phy2log, int64_t slots_per_rank) = 0;
  // Adds the tokens this rank routed to each (MoE layer, logical expert) since the last call, then forgets them.
  virtual void drain_routed_counts(std::span<int64_t> counts) = 0;
  virtual const ExchangeStats& stats() const = 0;
};

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;
  virtual void run(const CausalLm& model, int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
                   const float* topk_weights, int64_t num_tokens, float* out) = 0;
  // Called by every rank of the group at the same step boundary, after each step (EPLB rebalances here).
  virtual void after_step(CausalLm& model) { (void)model; }
  // The device-resident path, where this executor has one (null: exchange through run()).
  virtual DeviceExpertExecutor* device() { return nullptr; }
};

class LocalExpertExecutor final : public ExpertExecutor {
 public:
  void run(const CausalLm& model, int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
           const float* topk_weights, int64_t num_tokens, float* out) override;
};

}  // namespace deepinfer
