#include "src/model/cuda/cuda_expert_store.h"

#include "kernels/cuda/convert.cuh"

namespace deepinfer {

namespace {

using Bf16 = __nv_bfloat16;

}  // namespace

CudaExpertStore::CudaExpertStore(Dims dims, DeviceArena& arena, int num_sms, float swiglu_limit, Format format)
    : ExpertStore(dims), num_sms_(num_sms), swiglu_limit_(swiglu_limit), format_(format),
      held_(dims.num_moe_layers * dims.num_experts, false) {
  const int64_t E = dims.num_experts, H = dims.hidden, I = dims.intermediate;
  if (format_ == Format::kFp4) {
    DI_INPUT_CHECK(H % 32 == 0 && I % 32 == 0, "FP4 experts need hidden and intermediate sizes divisible by 32 (a "
                   "scale block); the model has {} and {}", H, I);
    staging_ = DeviceArray<Bf16>(3 * I * H);
  }
  for (int64_t l = 0; l < dims.num_moe_layers; ++l) {
    Layer layer;
    if (format_ == Format::kBf16) {
      layer.gate_up = static_cast<Bf16*>(arena.take(E * 2 * I * H * sizeof(Bf16)));
      layer.down = static_cast<Bf16*>(arena.take(E * H * I * sizeof(Bf16)));
    } else {
      layer.gate_up_fp4 = {static_cast<uint8_t*>(arena.take(E * 2 * I * H / 2)),
                           static_cast<uint8_t*>(arena.take(E * 2 * I * H / 32))};
      layer.down_fp4 = {static_cast<uint8_t*>(arena.take(E * H * I / 2)),
                        static_cast<uint8_t*>(arena.take(E * H * I / 32))};
    }
    layers_.push_back(layer);
  }
}

size_t CudaExpertStore::bytes_per_expert() const {
  const auto weights = static_cast<size_t>(3 * intermediate() * hidden());
  return format_ == Format::kBf16 ? weights * sizeof(Bf16) : weights / 2 + weights / 32;
}

void CudaExpertStore::store(int64_t moe_layer, int64_t expert, const Bf16* rows) {
  const int64_t H = hidden(), I = intermediate();
  const Layer& layer = layers_[moe_layer];
  if (format_ == Format::kBf16) {
    DI_CUDA_CHECK(cudaMemcpy(layer.gate_up + expert * 2 * I * H, rows, 2 * I * H * sizeof(Bf16), cudaMemcpyDefault));
    DI_CUDA_CHECK(cudaMemcpy(layer.down + expert * H * I, rows + 2 * I * H, H * I * sizeof(Bf16), cudaMemcpyDefault));
    return;
  }
  auto* gu_codes = const_cast<uint8_t*>(layer.gate_up_fp4.codes) + expert * 2 * I * H / 2;
  auto* gu_scales = const_cast<uint8_t*>(layer.gate_up_fp4.scales) + expert * 2 * I * H / 32;
  auto* d_codes = const_cast<uint8_t*>(layer.down_fp4.codes) + expert * H * I / 2;
  auto* d_scales = const_cast<uint8_t*>(layer.down_fp4.scales) + expert * H * I / 32;
  cuda::quantize_fp4_rows(rows, 2 * I, H, gu_codes, gu_scales, nullptr);
  cuda::quantize_fp4_rows(rows + 2 * I * H, H, I, d_codes, d_scales, nullptr);
  DI_CUDA_CHECK(cudaGetLastError());
}

void CudaExpertStore::load(int64_t moe_layer, int64_t expert, const DeviceWeightSource& weights,
                           const std::string& gate, const std::string& up, const std::string& down) {
  const int64_t H = hidden(), I = intermediate();
  if (format_ == Format::kBf16) {  // straight into the slot
    Bf16* gate_up = layers_[moe_layer].gate_up + expert * 2 * I * H;
    weights.fill_bf16(gate, {I, H}, gate_up);
    weights.fill_bf16(up, {I, H}, gate_up + I * H);
    weights.fill_bf16(down, {H, I}, layers_[moe_layer].down + expert * H * I);
  } else {
    weights.fill_bf16(gate, {I, H}, staging_.data());
    weights.fill_bf16(up, {I, H}, staging_.data() + I * H);
    weights.fill_bf16(down, {H, I}, staging_.data() + 2 * I * H);
    store(moe_layer, expert, staging_.data());
  }
  held_[index(moe_layer, expert)] = true;
}

DeviceMlp CudaExpertStore::expert_mlp(int64_t moe_layer, int64_t expert) const {
  const int64_t H = hidden(), I = intermediate();
  const Bf16* gate_up = layers_[moe_layer].gate_up + expert * 2 * I * H;
  const Bf16* down = layers_[moe_layer].down + expert * H * I;
  auto source = cuda::WeightSource::kResident;
  if (format_ == Format::kFp4) {
    dequantize(moe_layer, expert, 1, staging_.data(), staging_.data() + 2 * I * H);
    gate_up = staging_.data(), down = staging_.data() + 2 * I * H, source = cuda::WeightSource::kFromStream;
  }
  return {{.bf16 = gate_up, .n = 2 * I, .k = H}, {.bf16 = down, .n = H, .k = I}, I, source};
}

void CudaExpertStore::dequantize(int64_t moe_layer, int64_t first, int64_t count, Bf16* gate_up, Bf16* down) const {
  const int64_t H = hidden(), I = intermediate();
  const Layer& layer = layers_[moe_layer];
  DI_CHECK(format_ == Format::kFp4, "dequantize() is for FP4 experts (bf16 ones are read where they are)");
  cuda::dequantize_fp4_rows(layer.gate_up_fp4.codes + first * 2 * I * H / 2,
                            layer.gate_up_fp4.scales + first * 2 * I * H / 32, count * 2 * I, H, gate_up, nullptr);
  cuda::dequantize_fp4_rows(layer.down_fp4.codes + first * H * I / 2, layer.down_fp4.scales + first * H * I / 32,
                            count * H, I, down, nullptr);
}

bool CudaExpertStore::holds(int64_t moe_layer, int64_t expert) const { return held_[index(moe_layer, expert)]; }

void CudaExpertStore::compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const int64_t H = hidden();
  scratch_.reset();
  auto* x_dev = reinterpret_cast<Bf16*>(device_copy(scratch_, to_bf16_bits(x, n * H)));
  auto* y = scratch_.alloc<Bf16>(n * H);
  auto* y32 = scratch_.alloc<float>(n * H);
  const DeviceMlp mlp = expert_mlp(moe_layer, expert);
  device_mlp({cudaStreamPerThread, cublas_.get()}, mlp, x_dev, y, n, H, scratch_, num_sms_, swiglu_limit_);
  cuda::bf16_to_f32(y, y32, n * H, nullptr);
  DI_CUDA_CHECK(cudaMemcpy(out, y32, n * H * sizeof(float), cudaMemcpyDeviceToHost));
}

// The exchange order is [gate | up] then down, as the bf16 layout holds them.
std::vector<float> CudaExpertStore::export_weights(int64_t moe_layer, int64_t expert) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const int64_t I = intermediate(), H = hidden();
  std::vector<uint16_t> bits(3 * I * H);
  const DeviceMlp mlp = expert_mlp(moe_layer, expert);
  DI_CUDA_CHECK(cudaMemcpy(bits.data(), mlp.gate_up.bf16, 2 * I * H * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(bits.data() + 2 * I * H, mlp.down.bf16, H * I * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

void CudaExpertStore::import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) {
  const int64_t I = intermediate(), H = hidden();
  DI_CHECK(static_cast<int64_t>(weights.size()) == 3 * I * H, "expert weights of {} floats, expected {}",
           weights.size(), 3 * I * H);
  const std::vector<uint16_t> bits = to_bf16_bits(weights.data(), 3 * I * H);
  if (format_ == Format::kFp4) {
    DI_CUDA_CHECK(cudaMemcpy(staging_.data(), bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    store(moe_layer, expert, staging_.data());
  } else {
    store(moe_layer, expert, reinterpret_cast<const Bf16*>(bits.data()));
  }
  held_[index(moe_layer, expert)] = true;
}

// The slot stays allocated; it is only marked free.
void CudaExpertStore::drop(int64_t moe_layer, int64_t expert) { held_[index(moe_layer, expert)] = false; }

}  // namespace deepinfer
