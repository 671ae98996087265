#include "src/moe/device_rank_slice.h"

#include <algorithm>

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/moe_permute.cuh"

namespace deepinfer {

DeviceRankSlice::DeviceRankSlice(RankSliceDispatcher& slicer, int64_t num_experts, int64_t hidden,
                                 int64_t draw_bucket)
    : slicer_(slicer), num_experts_(num_experts), hidden_(hidden), draw_bucket_(draw_bucket),
      routed_counts_(slicer.placement().num_layers() * num_experts, 0),
      on_device_(slicer.placement().num_layers()) {}

const DeviceRankSlice::Layout& DeviceRankSlice::layout(int64_t layer, int64_t num_tokens) {
  const auto key = std::make_pair(layer, num_tokens);
  if (auto it = layouts_.find(key); it != layouts_.end()) return it->second;
  Layout l;
  if (draw_bucket_ > 0) {
    SliceLayout& drawn = drawn_[layer];
    if (static_cast<int64_t>(drawn.own_routed.size()) < num_tokens * slicer_.top_k())
      drawn = slicer_.layout(layer, (num_tokens + draw_bucket_ - 1) / draw_bucket_ * draw_bucket_);
    l.host = slicer_.prefix(drawn, layer, num_tokens);
  } else {
    l.host = slicer_.layout(layer, num_tokens);
  }
  const ExpertPlacement& placement = slicer_.placement();
  const int64_t S = placement.slots_per_rank(), rank = slicer_.rank();
  l.ids.resize(l.host.slots.size());
  l.weights = l.host.weights;
  for (size_t i = 0; i < l.ids.size(); ++i) {
    const int32_t slot = l.host.slots[i];
    l.ids[i] = slot >= 0 ? placement.logical_of_slot(layer, rank * S + slot) : static_cast<int32_t>(num_experts_);
    if (slot < 0) l.weights[i] = 0.0f;
  }
  for (const auto& [token, row] : l.host.own_rows) {
    l.own_tokens.push_back(static_cast<int32_t>(token));
    l.own_rows.push_back(static_cast<int32_t>(row));
  }
  for (int64_t pairs : l.host.pairs_of_slot) l.pairs_here += pairs;
  return layouts_.emplace(key, std::move(l)).first->second;
}

namespace {

// Copies `host` into `device` on the step's stream, growing it first (after the device has finished with it) where
// it is too small. The host vector stays alive (the layouts are kept), so the copy may complete later.
template <typename T>
void copy_in(DeviceArray<T>& device, const std::vector<T>& host) {
  if (host.empty()) return;
  if (device.size() < host.size()) {
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // earlier steps' kernels may still read the old buffer
    device = DeviceArray<T>(host.size() + host.size() / 4);
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice,
                                cudaStreamPerThread));
}

}  // namespace

const DeviceRankSlice::OnDevice& DeviceRankSlice::upload(int64_t layer, const Layout& l) {
  OnDevice& d = on_device_.at(layer);
  if (d.layout == &l) return d;
  copy_in(d.source_token, l.host.source_token);
  copy_in(d.ids, l.ids);
  copy_in(d.weights, l.weights);
  copy_in(d.own_rows, l.own_rows);
  copy_in(d.own_tokens, l.own_tokens);
  d.layout = &l;
  return d;
}

DeviceDispatch DeviceRankSlice::dispatch(int64_t moe_layer_idx, const void* x, const int32_t* /*topk_ids*/,
                                         const float* /*topk_weights*/, int64_t num_tokens) {
  const Layout& l = layout(moe_layer_idx, num_tokens);
  const OnDevice& d = upload(moe_layer_idx, l);
  slicer_.record(moe_layer_idx, l.host);
  for (int32_t e : l.host.own_routed) ++routed_counts_[moe_layer_idx * num_experts_ + e];
  const int64_t rows = l.host.rows(), H = hidden_;
  if (static_cast<int64_t>(x_recv_.size()) < rows * H) {
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // the previous layer's kernels may still read the old buffers
    x_recv_ = DeviceArray<__nv_bfloat16>(rows * H);
    y_recv_ = DeviceArray<__nv_bfloat16>(rows * H);
  }
  cuda::embedding(static_cast<const __nv_bfloat16*>(x), d.source_token.data(), x_recv_.data(), rows, H, nullptr);
  last_ = &l;
  last_on_device_ = &d;
  return {x_recv_.data(), d.ids.data(), d.weights.data(), rows, y_recv_.data(), l.pairs_here};
}

void DeviceRankSlice::combine(void* out) {
  const auto own = static_cast<int64_t>(last_->host.own_rows.size());
  cuda::add_rows_at(y_recv_.data(), last_on_device_->own_rows.data(), last_on_device_->own_tokens.data(), own, hidden_,
                    static_cast<__nv_bfloat16*>(out), nullptr);
}

void DeviceRankSlice::set_placement(const std::vector<std::vector<int32_t>>& /*phy2log*/, int64_t /*slots_per_rank*/) {
  throw InputError("a rank slice keeps the placement it was made with: EPLB does not run in a slice");
}

void DeviceRankSlice::drain_routed_counts(std::span<int64_t> counts) {
  DI_CHECK(counts.size() == routed_counts_.size(), "routed counts of {} entries, the slice keeps {}", counts.size(),
           routed_counts_.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += routed_counts_[i];
  std::fill(routed_counts_.begin(), routed_counts_.end(), 0);
}

void use_device_rank_slice(RankSliceDispatcher& slicer, int64_t num_experts, int64_t hidden, int64_t draw_bucket) {
  slicer.set_device_form(std::make_unique<DeviceRankSlice>(slicer, num_experts, hidden, draw_bucket));
}

}  // namespace deepinfer
