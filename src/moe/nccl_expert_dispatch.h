// Expert parallelism GPU to GPU: DeepEP's normal-mode dispatch and combine (kernels/cuda/ep_dispatch.cuh)
// around NCCL all-to-alls, with the placement semantics of ExpertParallelDispatcher (same slot choice, same
// replicas). Per MoE layer:
//   dispatch  layout kernel -> all-to-all of the per-rank counts -> one host sync to size the buffers ->
//             pack kernel -> all-to-all of the token records -> unpack into rows for the local experts;
//   compute   the MoE block's own routed-expert kernels over the received rows (between the two calls);
//   combine   all-to-all of the bf16 partial sums back -> combine kernel adds them in rank order (with pair
//             outputs, --batch-invariant: every entry's own output back -> moe_unpermute adds them in k order).
// Buffers grow to the largest step seen and are kept; nothing else allocates.
#pragma once

#include <cuda_bf16.h>

#include "src/core/device_array.h"
#include "src/comm/nccl_communicator.h"
#include "src/model/expert_dispatch.h"

namespace deepinfer {

class NcclExpertDispatch final : public DeviceExpertDispatcher {
 public:
  NcclExpertDispatch(NcclCommunicator& comm, int64_t num_experts, int64_t hidden, int64_t top_k);

  DeviceDispatch dispatch(int64_t moe_layer_idx, const void* x, const int32_t* topk_ids, const float* topk_weights,
                          int64_t num_tokens) override {
    return dispatch_on(moe_layer_idx, x, topk_ids, topk_weights, num_tokens, nullptr);
  }
  void combine(void* out) override { combine_on(out, nullptr); }
  void set_placement(const std::vector<std::vector<int32_t>>& phy2log, int64_t slots_per_rank) override;
  void set_pair_outputs(bool on) override { pair_outputs_ = on; }
  void drain_routed_counts(std::span<int64_t> counts) override;
  const ExchangeStats& stats() const override { return stats_; }

  // The two calls on a given stream (the benchmark times them apart).
  DeviceDispatch dispatch_on(int64_t moe_layer_idx, const void* x, const int32_t* topk_ids,
                             const float* topk_weights, int64_t num_tokens, cudaStream_t stream);
  void combine_on(void* out, cudaStream_t stream);

  int64_t record_bytes() const { return record_bytes_; }
  // Per-rank counts of the last dispatch: records sent to / received from each rank.
  const std::vector<int32_t>& sent() const { return sent_; }
  const std::vector<int32_t>& received() const { return received_; }

 private:
  NcclCommunicator& comm_;
  int64_t num_experts_, hidden_, top_k_, record_bytes_;
  int64_t num_layers_ = 0, slots_per_rank_ = 1, num_physical_ = 0;
  // Placement tables, per layer: replicas of each expert (CSR over slots) and the first slot on this rank.
  DeviceArray<int32_t> replica_offsets_, replica_slots_, local_slot_;
  DeviceArray<unsigned long long> routed_counts_;  // [layer][expert] since the last drain
  // Per-dispatch state.
  DeviceArray<int32_t> entry_rank_, token_pos_, counts_;  // counts_: sent [R] then received [R]
  DeviceArray<uint8_t> send_records_, recv_records_;
  DeviceArray<__nv_bfloat16> x_recv_, y_recv_, returned_;
  DeviceArray<int32_t> ids_recv_;
  DeviceArray<float> weights_recv_;
  std::vector<int32_t> sent_, received_;
  int64_t num_tokens_ = 0;
  // Pair outputs: the dispatched tokens' weights (the caller's, alive until combine) and each entry's returned row.
  bool pair_outputs_ = false;
  const float* topk_weights_ = nullptr;
  DeviceArray<int32_t> pair_row_of_;
  ExchangeStats stats_;
};

}  // namespace deepinfer
