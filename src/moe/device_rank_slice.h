// The GPU form of a rank slice (moe/rank_slice_dispatcher.h): the CUDA MoE block's dispatch and combine for one EP
// rank run alone. The layout of each (MoE layer, batch) is drawn on the host at the first step that needs it and
// kept on the device; later steps replay it (the draws are independent of the values, so the work of a step is
// that of a fresh draw; a step-by-step identical draw is the host form's, which CI compares with real ranks).
//   dispatch  received rows gathered from the own rows on the device (a peer's token stands in as one of ours),
//             their logical expert ids (num_experts where served elsewhere, weight 0) and weights as stored;
//   combine   the partial sums of the own tokens served here added at their rows (what peers would return is not
//             modelled, as in the host form).
// Every call is recorded in the host slicer's statistics, so served counts and exchange bytes stay the real rank's.
#pragma once

#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "src/core/device_array.h"
#include "src/moe/rank_slice_dispatcher.h"

namespace deepinfer {

class DeviceRankSlice final : public DeviceExpertDispatcher {
 public:
  // draw_bucket > 0: a step of n tokens takes the prefix (RankSliceDispatcher::prefix) of one draw per layer, made
  // for the most tokens seen so far rounded up to a multiple of draw_bucket, so that steps of many sizes
  // (speculative verify steps) cost no fresh host draw each; 0: one draw per layer and size.
  DeviceRankSlice(RankSliceDispatcher& slicer, int64_t num_experts, int64_t hidden, int64_t draw_bucket = 0);

  DeviceDispatch dispatch(int64_t moe_layer_idx, const void* x, const int32_t* topk_ids, const float* topk_weights,
                          int64_t num_tokens) override;
  void combine(void* out) override;
  // The slice's placement is the one it was made with (no EPLB runs in a slice).
  void set_placement(const std::vector<std::vector<int32_t>>& phy2log, int64_t slots_per_rank) override;
  void drain_routed_counts(std::span<int64_t> counts) override;
  const ExchangeStats& stats() const override { return slicer_.stats(); }

 private:
  // A layout on the host, per (MoE layer, own tokens), in the device arrays' forms.
  struct Layout {
    SliceLayout host;
    std::vector<int32_t> ids, own_rows, own_tokens;
    std::vector<float> weights;
    int64_t pairs_here = 0;  // entries this rank serves (sum of host.pairs_of_slot)
  };
  // Per MoE layer: the layout its last dispatch used, copied (asynchronously, on the step's stream) into buffers
  // that only grow. Steps of a new size thus cost copies, not allocations (cudaMalloc waits for the device, which
  // would serialise the host's preparation with the step's kernels: speculative verify steps change size each step).
  struct OnDevice {
    DeviceArray<int32_t> source_token, ids, own_rows, own_tokens;
    DeviceArray<float> weights;
    const Layout* layout = nullptr;
  };
  const Layout& layout(int64_t layer, int64_t num_tokens);
  const OnDevice& upload(int64_t layer, const Layout& l);

  RankSliceDispatcher& slicer_;
  int64_t num_experts_, hidden_;
  std::map<std::pair<int64_t, int64_t>, Layout> layouts_;  // by (MoE layer, own tokens)
  int64_t draw_bucket_;
  std::map<int64_t, SliceLayout> drawn_;  // with draw_bucket_: by MoE layer, the largest draw
  std::vector<int64_t> routed_counts_;                      // [layer][expert] since the last drain
  std::vector<OnDevice> on_device_;  // by MoE layer
  DeviceArray<__nv_bfloat16> x_recv_, y_recv_;
  const Layout* last_ = nullptr;
  const OnDevice* last_on_device_ = nullptr;
};

// For the bench command: the device form, owned by the slicer.
void use_device_rank_slice(RankSliceDispatcher& slicer, int64_t num_experts, int64_t hidden, int64_t draw_bucket = 0);

}  // namespace deepinfer
