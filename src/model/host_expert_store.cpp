#include "src/model/host_expert_store.h"

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "src/core/check.h"

namespace deepinfer {

void swiglu_expert_forward(const float* gate_w, const float* up_w, const float* down_w, const float* x, int64_t n,
                           int64_t hidden, int64_t intermediate, float swiglu_limit, float* out) {
  const int64_t H = hidden, I = intermediate;
  std::vector<float> gate(n * I), up(n * I);
  cpu::linear(x, gate_w, nullptr, gate.data(), n, I, H);
  cpu::linear(x, up_w, nullptr, up.data(), n, I, H);
  cpu::clamp_swiglu(gate.data(), up.data(), n * I, swiglu_limit);
  cpu::silu_mul(gate.data(), up.data(), gate.data(), n * I);
  cpu::linear(gate.data(), down_w, nullptr, out, n, H, I);
}

HostExpertStore::HostExpertStore(Dims dims, float swiglu_limit)
    : ExpertStore(dims), swiglu_limit_(swiglu_limit), experts_(dims.num_moe_layers * dims.num_experts) {}

void HostExpertStore::take_from(WeightStore& weights,
                                const std::function<TensorNames(int64_t moe_layer, int64_t expert)>& names) {
  for (int64_t l = 0; l < num_moe_layers(); ++l)
    for (int64_t e = 0; e < num_experts(); ++e) {
      const TensorNames n = names(l, e);
      if (weights.data_or_null(n[0]) == nullptr) continue;
      at(l, e) = {weights.take(n[0]), weights.take(n[1]), weights.take(n[2])};
    }
}

bool HostExpertStore::holds(int64_t moe_layer, int64_t expert) const { return at(moe_layer, expert).gate.defined(); }

void HostExpertStore::compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const Expert& w = at(moe_layer, expert);
  swiglu_expert_forward(w.gate.data<float>(), w.up.data<float>(), w.down.data<float>(), x, n, hidden(),
                        intermediate(), swiglu_limit_, out);
}

std::vector<float> HostExpertStore::export_weights(int64_t moe_layer, int64_t expert) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const Expert& w = at(moe_layer, expert);
  const int64_t n = intermediate() * hidden();
  std::vector<float> out(3 * n);
  std::copy_n(w.gate.data<float>(), n, out.begin());
  std::copy_n(w.up.data<float>(), n, out.begin() + n);
  std::copy_n(w.down.data<float>(), n, out.begin() + 2 * n);
  return out;
}

void HostExpertStore::import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) {
  const int64_t I = intermediate(), H = hidden();
  DI_CHECK(static_cast<int64_t>(weights.size()) == 3 * I * H, "expert weights of {} floats, expected {}",
           weights.size(), 3 * I * H);
  const Shape shapes[3] = {{I, H}, {I, H}, {H, I}};
  Tensor parts[3];
  for (int i = 0; i < 3; ++i) {
    parts[i] = Tensor::zeros(shapes[i]);
    std::copy_n(weights.data() + i * I * H, I * H, parts[i].data<float>());
  }
  at(moe_layer, expert) = {std::move(parts[0]), std::move(parts[1]), std::move(parts[2])};
}

void HostExpertStore::drop(int64_t moe_layer, int64_t expert) { at(moe_layer, expert) = {}; }

}  // namespace deepinfer
