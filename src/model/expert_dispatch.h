// Expert parallelism as the MoE block sees it, with DeepEP's two calls: dispatch() sends each routed token to
// the ranks that hold its experts and returns the rows this rank must compute; the block runs them through
// its ExpertStore (run_routed_experts, or the device kernels); combine() sends the partial sums back and adds
// them at each token's source row. Without expert parallelism the block runs the store directly (no
// dispatcher). Every rank of an expert-parallel group calls dispatch and combine for every MoE layer of every
// step, with zero tokens if it has none.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/core/check.h"
#include "src/comm/split_rows.h"

namespace deepinfer {

class ExpertStore;

// What a dispatcher moved, counted on each rank.
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
  // What was moved since `earlier` (counts taken from the same dispatcher).
  ExchangeStats operator-(const ExchangeStats& earlier) const {
    return {num_exchanges - earlier.num_exchanges, dispatch_bytes - earlier.dispatch_bytes,
            combine_bytes - earlier.combine_bytes, tokens_sent - earlier.tokens_sent,
            tokens_received - earlier.tokens_received};
  }
};

// The rows a dispatch hands this rank, host fp32: row r's entry k is served here when ids[r, k] >= 0, by the
// expert expert_of_id[ids[r, k]] with weight weights[r, k]. The block writes the weighted sums into y (zeroed) or,
// with pair outputs on, each served entry's own unweighted output at y[r, k].
struct HostDispatch {
  const float* x = nullptr;          // [rows, hidden]
  const int32_t* ids = nullptr;      // [rows, top_k]
  const float* weights = nullptr;    // [rows, top_k]
  std::span<const int32_t> expert_of_id;
  int64_t rows = 0;
  float* y = nullptr;                // [rows, hidden]; with pair outputs [rows, top_k, hidden]
};

// The same on the device (CUDA builds with NCCL), GPU to GPU.
struct DeviceDispatch {
  const void* x = nullptr;           // bf16 [rows, hidden]
  const int32_t* ids = nullptr;      // [rows, top_k]: the logical expert, or num_experts when served elsewhere
  const float* weights = nullptr;    // [rows, top_k]
  int64_t rows = 0;
  void* y = nullptr;                 // bf16 [rows, hidden], for the block to fill; pair outputs: [rows, top_k, hidden]
  int64_t pairs_here = -1;           // entries served here, where the dispatcher knows it on the host (-1: not)
};

class DeviceExpertDispatcher {
 public:
  virtual ~DeviceExpertDispatcher() = default;
  // x bf16 [num_tokens, hidden], topk ids / weights as routed; on the calling thread's default stream.
  virtual DeviceDispatch dispatch(int64_t moe_layer_idx, const void* x, const int32_t* topk_ids,
                                  const float* topk_weights, int64_t num_tokens) = 0;
  // Adds the partial sums of the last dispatch (written into its y) into out bf16 [num_tokens, hidden]; with pair
  // outputs, out[t] = bf16(out[t] + sum_k w[t, k] y(t, k)) in k order (moe_unpermute's arithmetic).
  virtual void combine(void* out) = 0;
  // --batch-invariant: the block writes each entry's own output and combine sums a token's entries in k order, so
  // that its bits do not depend on which ranks served them (the sum per destination rank would).
  virtual void set_pair_outputs(bool on) { DI_CHECK(!on, "this device dispatcher returns no pair outputs"); }
  // phy2log[layer][slot]; rank r owns slots [r * slots_per_rank, (r + 1) * slots_per_rank). Not collective.
  virtual void set_placement(const std::vector<std::vector<int32_t>>& phy2log, int64_t slots_per_rank) = 0;
  // Adds the tokens this rank routed to each (MoE layer, logical expert) since the last call, then forgets them.
  virtual void drain_routed_counts(std::span<int64_t> counts) = 0;
  virtual const ExchangeStats& stats() const = 0;
};

class ExpertDispatcher {
 public:
  virtual ~ExpertDispatcher() = default;
  virtual HostDispatch dispatch(int64_t moe_layer_idx, const float* x, const int32_t* topk_ids,
                                const float* topk_weights, int64_t num_tokens) = 0;
  // out [num_tokens, hidden] += the partial sums of the last dispatch.
  virtual void combine(float* out) = 0;
  // With pair outputs (ExpertParallelDispatcher::set_pair_outputs): every entry's own output, pairs [num_tokens,
  // top_k, hidden], each from the rank that served it, for the caller to sum (in place of combine).
  virtual void combine_pairs(float* pairs) {
    (void)pairs;
    DI_CHECK(false, "this dispatcher returns no pair outputs");
  }
  virtual bool pair_outputs() const { return false; }
  // Called by every rank of the group at the same step boundary, after each step (EPLB rebalances here).
  virtual void after_step(ExpertStore& experts) { (void)experts; }
  // The device-resident path, where this dispatcher has one (null: exchange through dispatch()).
  virtual DeviceExpertDispatcher* device() { return nullptr; }
  // Rows of a table the group's ranks hold in parts (model/row_shard.h: DeepSeek-V4.1's engram tables, fetched
  // as DeepEP's EngramBuffer does), through the group's communicator: see comm/split_rows.h. Every rank of the
  // group calls it at the same point of every step.
  virtual void fetch_split_rows(std::span<const int64_t> keys, std::span<const int32_t> owners, int64_t row_bytes,
                                const ServeRows& serve, std::byte* out) = 0;
};

}  // namespace deepinfer
