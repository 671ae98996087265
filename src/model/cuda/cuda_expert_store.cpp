#include "src/model/cuda/cuda_expert_store.h"

#include "kernels/cuda/convert.cuh"

namespace deepinfer {

CudaExpertStore::CudaExpertStore(Dims dims, DeviceArena& arena, int num_sms, float swiglu_limit)
    : ExpertStore(dims), num_sms_(num_sms), swiglu_limit_(swiglu_limit), held_(dims.num_moe_layers * dims.num_experts, false) {
  const int64_t E = dims.num_experts, H = dims.hidden, I = dims.intermediate;
  for (int64_t l = 0; l < dims.num_moe_layers; ++l) {
    gate_up_.push_back(static_cast<__nv_bfloat16*>(arena.take(E * 2 * I * H * sizeof(__nv_bfloat16))));
    down_.push_back(static_cast<__nv_bfloat16*>(arena.take(E * H * I * sizeof(__nv_bfloat16))));
  }
}

void CudaExpertStore::load(int64_t moe_layer, int64_t expert, const DeviceWeightSource& weights,
                           const std::string& gate, const std::string& up, const std::string& down) {
  const int64_t H = hidden(), I = intermediate();
  __nv_bfloat16* gate_up = gate_up_[moe_layer] + expert * 2 * I * H;
  weights.fill_bf16(gate, {I, H}, gate_up);
  weights.fill_bf16(up, {I, H}, gate_up + I * H);
  weights.fill_bf16(down, {H, I}, down_[moe_layer] + expert * H * I);
  held_[index(moe_layer, expert)] = true;
}

bool CudaExpertStore::holds(int64_t moe_layer, int64_t expert) const { return held_[index(moe_layer, expert)]; }

void CudaExpertStore::compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const int64_t H = hidden(), I = intermediate();
  scratch_.reset();
  auto* x_dev = reinterpret_cast<__nv_bfloat16*>(device_copy(scratch_, to_bf16_bits(x, n * H)));
  auto* y = scratch_.alloc<__nv_bfloat16>(n * H);
  auto* y32 = scratch_.alloc<float>(n * H);
  const DeviceMlp mlp{gate_up_[moe_layer] + expert * 2 * I * H, down_[moe_layer] + expert * H * I, I};
  device_mlp({cudaStreamPerThread, cublas_.get()}, mlp, x_dev, y, n, H, scratch_, num_sms_, swiglu_limit_);
  cuda::bf16_to_f32(y, y32, n * H, nullptr);
  DI_CUDA_CHECK(cudaMemcpy(out, y32, n * H * sizeof(float), cudaMemcpyDeviceToHost));
}

// The device layout [gate | up] then down is the exchange order already.
std::vector<float> CudaExpertStore::export_weights(int64_t moe_layer, int64_t expert) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const int64_t I = intermediate(), H = hidden();
  std::vector<uint16_t> bits(3 * I * H);
  DI_CUDA_CHECK(cudaMemcpy(bits.data(), gate_up_[moe_layer] + expert * 2 * I * H, 2 * I * H * sizeof(uint16_t),
                           cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(bits.data() + 2 * I * H, down_[moe_layer] + expert * H * I, H * I * sizeof(uint16_t),
                           cudaMemcpyDeviceToHost));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

void CudaExpertStore::import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) {
  const int64_t I = intermediate(), H = hidden();
  DI_CHECK(static_cast<int64_t>(weights.size()) == 3 * I * H, "expert weights of {} floats, expected {}",
           weights.size(), 3 * I * H);
  const size_t i = index(moe_layer, expert);
  const std::vector<uint16_t> bits = to_bf16_bits(weights.data(), 3 * I * H);
  DI_CUDA_CHECK(cudaMemcpy(gate_up_[moe_layer] + expert * 2 * I * H, bits.data(), 2 * I * H * sizeof(uint16_t),
                           cudaMemcpyHostToDevice));
  DI_CUDA_CHECK(cudaMemcpy(down_[moe_layer] + expert * H * I, bits.data() + 2 * I * H, H * I * sizeof(uint16_t),
                           cudaMemcpyHostToDevice));
  held_[i] = true;
}

// The slot stays allocated; it is only marked free.
void CudaExpertStore::drop(int64_t moe_layer, int64_t expert) { held_[index(moe_layer, expert)] = false; }

}  // namespace deepinfer
