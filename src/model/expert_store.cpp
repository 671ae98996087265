#include "src/model/expert_store.h"

#include <algorithm>
#include <utility>

#include "kernels/cpu/ops.h"
#include "src/core/check.h"
#include "src/model/expert_dispatch.h"

namespace deepinfer {

size_t ExpertStore::index(int64_t moe_layer, int64_t expert) const {
  DI_CHECK(moe_layer >= 0 && moe_layer < num_moe_layers() && expert >= 0 && expert < num_experts(),
           "expert {} of MoE layer {} outside {} layers x {} experts", expert, moe_layer, num_moe_layers(),
           num_experts());
  return static_cast<size_t>(moe_layer * num_experts() + expert);
}

void run_routed_experts(const ExpertStore& store, int64_t moe_layer, const float* x, const int32_t* ids,
                        const float* weights, int64_t rows, int64_t top_k, std::span<const int32_t> expert_of_id,
                        float* y, bool pairs) {
  const int64_t H = store.hidden();
  const int64_t num_ids = expert_of_id.empty() ? store.num_experts() : static_cast<int64_t>(expert_of_id.size());
  // Group the (entry, weight) pairs by id, then run each expert once over its rows.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(num_ids);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t id = ids[r * top_k + k];
      if (id < 0) continue;
      DI_CHECK(id < num_ids, "routed id {} outside [0, {})", id, num_ids);
      routed[id].emplace_back(r * top_k + k, pairs ? 1.0f : weights[r * top_k + k]);
    }
  std::vector<float> inputs, outputs;
  for (int64_t id = 0; id < num_ids; ++id) {
    const auto& entries = routed[id];
    if (entries.empty()) continue;
    const auto n = static_cast<int64_t>(entries.size());
    inputs.resize(n * H);
    outputs.resize(n * H);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + entries[i].first / top_k * H, H, inputs.data() + i * H);
    store.compute(moe_layer, expert_of_id.empty() ? id : expert_of_id[id], inputs.data(), n, outputs.data());
    for (int64_t i = 0; i < n; ++i) {
      if (pairs) std::copy_n(outputs.data() + i * H, H, y + entries[i].first * H);
      else cpu::axpy(entries[i].second, outputs.data() + i * H, y + entries[i].first / top_k * H, H);
    }
  }
}

void add_routed_experts(const ExpertStore& store, ExpertDispatcher* dispatcher, int64_t moe_layer, const float* x,
                        const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, int64_t top_k,
                        float* out, bool entry_order) {
  const int64_t H = store.hidden();
  if (dispatcher == nullptr && entry_order) {  // each entry's output, then the weighted sum in k order
    std::vector<float> pairs(num_tokens * top_k * H);
    run_routed_experts(store, moe_layer, x, topk_ids, topk_weights, num_tokens, top_k, {}, pairs.data(), true);
    for (int64_t i = 0; i < num_tokens * top_k; ++i)
      cpu::axpy(topk_weights[i], pairs.data() + i * H, out + i / top_k * H, H);
    return;
  }
  if (dispatcher == nullptr) {
    run_routed_experts(store, moe_layer, x, topk_ids, topk_weights, num_tokens, top_k, {}, out);
    return;
  }
  DI_CHECK(dispatcher->pair_outputs() == entry_order, "entry-order sums need the dispatcher's pair outputs (and only "
           "they give them): --batch-invariant must reach both");
  const HostDispatch mine = dispatcher->dispatch(moe_layer, x, topk_ids, topk_weights, num_tokens);
  run_routed_experts(store, moe_layer, mine.x, mine.ids, mine.weights, mine.rows, top_k, mine.expert_of_id, mine.y,
                     entry_order);
  dispatcher->combine(out);  // with pair outputs: out += sum_k w_k y_k, in k order, as above
}

}  // namespace deepinfer
