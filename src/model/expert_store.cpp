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
                        float* y) {
  const int64_t H = store.hidden();
  const int64_t num_ids = expert_of_id.empty() ? store.num_experts() : static_cast<int64_t>(expert_of_id.size());
  // Group the (row, weight) pairs by id, then run each expert once over its rows.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(num_ids);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t id = ids[r * top_k + k];
      if (id < 0) continue;
      DI_CHECK(id < num_ids, "routed id {} outside [0, {})", id, num_ids);
      routed[id].emplace_back(r, weights[r * top_k + k]);
    }
  std::vector<float> inputs, outputs;
  for (int64_t id = 0; id < num_ids; ++id) {
    const auto& pairs = routed[id];
    if (pairs.empty()) continue;
    const auto n = static_cast<int64_t>(pairs.size());
    inputs.resize(n * H);
    outputs.resize(n * H);
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + pairs[i].first * H, H, inputs.data() + i * H);
    store.compute(moe_layer, expert_of_id.empty() ? id : expert_of_id[id], inputs.data(), n, outputs.data());
    for (int64_t i = 0; i < n; ++i) cpu::axpy(pairs[i].second, outputs.data() + i * H, y + pairs[i].first * H, H);
  }
}

void add_routed_experts(const ExpertStore& store, ExpertDispatcher* dispatcher, int64_t moe_layer, const float* x,
                        const int32_t* topk_ids, const float* topk_weights, int64_t num_tokens, int64_t top_k,
                        float* out) {
  if (dispatcher == nullptr) {
    run_routed_experts(store, moe_layer, x, topk_ids, topk_weights, num_tokens, top_k, {}, out);
    return;
  }
  const HostDispatch mine = dispatcher->dispatch(moe_layer, x, topk_ids, topk_weights, num_tokens);
  run_routed_experts(store, moe_layer, mine.x, mine.ids, mine.weights, mine.rows, top_k, mine.expert_of_id, mine.y);
  dispatcher->combine(out);
}

}  // namespace deepinfer
