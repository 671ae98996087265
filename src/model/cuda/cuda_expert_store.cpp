#include "src/model/cuda/cuda_expert_store.h"

#include <algorithm>
#include <initializer_list>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/fp8_linear.cuh"

namespace deepinfer {

namespace {

using Bf16 = __nv_bfloat16;

}  // namespace

CudaExpertStore::CudaExpertStore(Dims dims, DeviceArena& arena, int num_sms, float swiglu_limit, Format format,
                                 int64_t capacity, int64_t fp8_block)
    : ExpertStore(dims), num_sms_(num_sms), swiglu_limit_(swiglu_limit), format_(format),
      capacity_(capacity > 0 && capacity < dims.num_experts ? capacity : dims.num_experts), fp8_block_(fp8_block) {
  const int64_t E = dims.num_experts, C = capacity_, H = dims.hidden, I = dims.intermediate;
  if (format_ == Format::kFp4) {
    DI_INPUT_CHECK(H % 32 == 0 && I % 32 == 0, "FP4 experts need hidden and intermediate sizes divisible by 32 (a "
                   "scale block); the model has {} and {}", H, I);
    staging_ = DeviceArray<Bf16>(3 * I * H);
  }
  if (format_ == Format::kFp8) {
    DI_INPUT_CHECK(fp8_block_ % 16 == 0 && fp8_block_ > 0 && H % fp8_block_ == 0 && I % fp8_block_ == 0,
                   "FP8 experts need hidden and intermediate sizes divisible by their {}-wide scale tiles (and tiles "
                   "a multiple of 16); the model has {} and {}", fp8_block_, H, I);
    staging_ = DeviceArray<Bf16>(3 * I * H);
  }
  const auto tiles = [&](int64_t rows, int64_t cols) { return rows / fp8_block_ * (cols / fp8_block_); };
  for (int64_t l = 0; l < dims.num_moe_layers; ++l) {
    Layer layer;
    if (format_ == Format::kBf16) {
      layer.gate_up = static_cast<Bf16*>(arena.take(C * 2 * I * H * sizeof(Bf16)));
      layer.down = static_cast<Bf16*>(arena.take(C * H * I * sizeof(Bf16)));
    } else if (format_ == Format::kFp8) {
      const auto block = static_cast<int32_t>(fp8_block_);
      layer.gate_up_fp8 = {static_cast<uint8_t*>(arena.take(C * 2 * I * H)),
                           static_cast<float*>(arena.take(tiles(C * 2 * I, H) * sizeof(float))), block};
      layer.down_fp8 = {static_cast<uint8_t*>(arena.take(C * H * I)),
                        static_cast<float*>(arena.take(tiles(C * H, I) * sizeof(float))), block};
    } else {
      layer.gate_up_fp4 = {static_cast<uint8_t*>(arena.take(C * 2 * I * H / 2)),
                           static_cast<uint8_t*>(arena.take(C * 2 * I * H / 32))};
      layer.down_fp4 = {static_cast<uint8_t*>(arena.take(C * H * I / 2)),
                        static_cast<uint8_t*>(arena.take(C * H * I / 32))};
    }
    layer.place_of.assign(E, -1);
    for (int64_t p = C - 1; C < E && p >= 0; --p) layer.free_places.push_back(static_cast<int32_t>(p));
    layer.device_places = DeviceArray<int32_t>::from_host(std::vector<int32_t>(E, static_cast<int32_t>(C)));
    layers_.push_back(std::move(layer));
  }
}

int64_t CudaExpertStore::place(int64_t moe_layer, int64_t expert) const {
  (void)index(moe_layer, expert);  // checks the bounds
  const int32_t p = layers_[moe_layer].place_of[expert];
  DI_CHECK(p >= 0, "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  return p;
}

void CudaExpertStore::set_place(int64_t moe_layer, int64_t expert, int32_t place) {
  Layer& layer = layers_[moe_layer];
  layer.place_of[expert] = place;
  const int32_t on_device = place >= 0 ? place : static_cast<int32_t>(capacity_);
  DI_CUDA_CHECK(cudaMemcpy(layer.device_places.data() + expert, &on_device, sizeof(int32_t), cudaMemcpyHostToDevice));
}

int64_t CudaExpertStore::acquire(int64_t moe_layer, int64_t expert) {
  (void)index(moe_layer, expert);
  Layer& layer = layers_[moe_layer];
  if (layer.place_of[expert] >= 0) return layer.place_of[expert];
  int32_t p = static_cast<int32_t>(expert);
  if (capacity_ < num_experts()) {
    DI_CHECK(!layer.free_places.empty(), "MoE layer {}: the expert store's {} places are taken (expert {} needs one)",
             moe_layer, capacity_, expert);
    p = layer.free_places.back();
    layer.free_places.pop_back();
  }
  set_place(moe_layer, expert, p);
  return p;
}

size_t CudaExpertStore::bytes_per_expert() const {
  const auto weights = static_cast<size_t>(3 * intermediate() * hidden());
  switch (format_) {
    case Format::kBf16: return weights * sizeof(Bf16);
    case Format::kFp4: return weights / 2 + weights / 32;
    case Format::kFp8: break;
  }
  return weights + weights / static_cast<size_t>(fp8_block_ * fp8_block_) * sizeof(float);
}

uint8_t* CudaExpertStore::fp8_codes(const cuda::Fp8Rows& rows, int64_t first_row, int64_t cols) const {
  return const_cast<uint8_t*>(rows.codes) + first_row * cols;
}

float* CudaExpertStore::fp8_scales(const cuda::Fp8Rows& rows, int64_t first_row, int64_t cols) const {
  return const_cast<float*>(rows.scales) + first_row / fp8_block_ * (cols / fp8_block_);
}

void CudaExpertStore::store(int64_t moe_layer, int64_t place, const Bf16* rows) {
  const int64_t H = hidden(), I = intermediate();
  const Layer& layer = layers_[moe_layer];
  if (format_ == Format::kBf16) {
    DI_CUDA_CHECK(cudaMemcpy(layer.gate_up + place * 2 * I * H, rows, 2 * I * H * sizeof(Bf16), cudaMemcpyDefault));
    DI_CUDA_CHECK(cudaMemcpy(layer.down + place * H * I, rows + 2 * I * H, H * I * sizeof(Bf16), cudaMemcpyDefault));
    return;
  }
  if (format_ == Format::kFp8) {
    const auto block = static_cast<int32_t>(fp8_block_);
    cuda::quantize_fp8_scaled(rows, 2 * I, H, block, fp8_codes(layer.gate_up_fp8, place * 2 * I, H),
                              fp8_scales(layer.gate_up_fp8, place * 2 * I, H), nullptr);
    cuda::quantize_fp8_scaled(rows + 2 * I * H, H, I, block, fp8_codes(layer.down_fp8, place * H, I),
                              fp8_scales(layer.down_fp8, place * H, I), nullptr);
    DI_CUDA_CHECK(cudaGetLastError());
    return;
  }
  auto* gu_codes = const_cast<uint8_t*>(layer.gate_up_fp4.codes) + place * 2 * I * H / 2;
  auto* gu_scales = const_cast<uint8_t*>(layer.gate_up_fp4.scales) + place * 2 * I * H / 32;
  auto* d_codes = const_cast<uint8_t*>(layer.down_fp4.codes) + place * H * I / 2;
  auto* d_scales = const_cast<uint8_t*>(layer.down_fp4.scales) + place * H * I / 32;
  cuda::quantize_fp4_rows(rows, 2 * I, H, gu_codes, gu_scales, nullptr);
  cuda::quantize_fp4_rows(rows + 2 * I * H, H, I, d_codes, d_scales, nullptr);
  DI_CUDA_CHECK(cudaGetLastError());
}

void CudaExpertStore::load(int64_t moe_layer, int64_t expert, const DeviceWeightSource& weights,
                           const std::string& gate, const std::string& up, const std::string& down) {
  const int64_t H = hidden(), I = intermediate();
  const int64_t p = acquire(moe_layer, expert);
  if (format_ == Format::kBf16) {  // straight into the place
    Bf16* gate_up = layers_[moe_layer].gate_up + p * 2 * I * H;
    weights.fill_bf16(gate, {I, H}, gate_up);
    weights.fill_bf16(up, {I, H}, gate_up + I * H);
    weights.fill_bf16(down, {H, I}, layers_[moe_layer].down + p * H * I);
  } else if (format_ == Format::kFp8 &&
             std::ranges::all_of(std::initializer_list<const std::string*>{&gate, &up, &down},
                                 [&](const std::string* name) { return weights.stored_fp8(*name).value_or(true); })) {
    // As stored (a checkpoint's codes and scales; a host store's or dummy values quantised), straight into the place.
    const Layer& layer = layers_[moe_layer];
    const cuda::Fp8Rows gu = layer.gate_up_fp8, d = layer.down_fp8;
    weights.fill_fp8(gate, {I, H}, fp8_block_, fp8_codes(gu, p * 2 * I, H), fp8_scales(gu, p * 2 * I, H));
    weights.fill_fp8(up, {I, H}, fp8_block_, fp8_codes(gu, p * 2 * I + I, H), fp8_scales(gu, p * 2 * I + I, H));
    weights.fill_fp8(down, {H, I}, fp8_block_, fp8_codes(d, p * H, I), fp8_scales(d, p * H, I));
  } else {
    weights.fill_bf16(gate, {I, H}, staging_.data());
    weights.fill_bf16(up, {I, H}, staging_.data() + I * H);
    weights.fill_bf16(down, {H, I}, staging_.data() + 2 * I * H);
    store(moe_layer, p, staging_.data());
  }
}

DeviceMlp CudaExpertStore::expert_mlp(int64_t moe_layer, int64_t expert) const {
  const int64_t H = hidden(), I = intermediate();
  const int64_t p = place(moe_layer, expert);
  const Bf16* gate_up = layers_[moe_layer].gate_up + p * 2 * I * H;
  const Bf16* down = layers_[moe_layer].down + p * H * I;
  auto source = cuda::WeightSource::kResident;
  if (quantized()) {
    dequantize(moe_layer, p, 1, staging_.data(), staging_.data() + 2 * I * H);
    gate_up = staging_.data(), down = staging_.data() + 2 * I * H, source = cuda::WeightSource::kFromStream;
  }
  return {{.bf16 = gate_up, .n = 2 * I, .k = H}, {.bf16 = down, .n = H, .k = I}, I, source};
}

void CudaExpertStore::dequantize(int64_t moe_layer, int64_t first, int64_t count, Bf16* gate_up, Bf16* down) const {
  const int64_t H = hidden(), I = intermediate();
  const Layer& layer = layers_[moe_layer];
  DI_CHECK(quantized(), "dequantize() is for FP4 and FP8 experts (bf16 ones are read where they are)");
  if (format_ == Format::kFp8) {
    const auto grid = [&](const cuda::Fp8Rows& rows, int64_t first_row, int64_t cols) {
      return cuda::Fp8BlockScales::fp32(fp8_scales(rows, first_row, cols), rows.block);
    };
    cuda::dequantize_fp8_blocks(fp8_codes(layer.gate_up_fp8, first * 2 * I, H),
                                grid(layer.gate_up_fp8, first * 2 * I, H), count * 2 * I, H, gate_up, nullptr);
    cuda::dequantize_fp8_blocks(fp8_codes(layer.down_fp8, first * H, I), grid(layer.down_fp8, first * H, I), count * H,
                                I, down, nullptr);
    return;
  }
  cuda::dequantize_fp4_rows(layer.gate_up_fp4.codes + first * 2 * I * H / 2,
                            layer.gate_up_fp4.scales + first * 2 * I * H / 32, count * 2 * I, H, gate_up, nullptr);
  cuda::dequantize_fp4_rows(layer.down_fp4.codes + first * H * I / 2, layer.down_fp4.scales + first * H * I / 32,
                            count * H, I, down, nullptr);
}

bool CudaExpertStore::holds(int64_t moe_layer, int64_t expert) const {
  (void)index(moe_layer, expert);
  return layers_[moe_layer].place_of[expert] >= 0;
}

void CudaExpertStore::compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const {
  DI_CHECK(holds(moe_layer, expert), "expert {} of MoE layer {} is not held on this rank", expert, moe_layer);
  const int64_t H = hidden();
  scratch_.reset();
  auto* x_dev = reinterpret_cast<Bf16*>(device_copy(scratch_, to_bf16_bits(x, n * H)));
  auto* y = scratch_.alloc<Bf16>(n * H);
  auto* y32 = scratch_.alloc<float>(n * H);
  const DeviceMlp mlp = expert_mlp(moe_layer, expert);
  device_mlp({cudaStreamPerThread, cublas_.get(), false, Fp8Gemm{}}, mlp, x_dev, y, n, H, scratch_, num_sms_,
             swiglu_limit_);
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
  const int64_t p = acquire(moe_layer, expert);
  if (quantized()) {
    DI_CUDA_CHECK(cudaMemcpy(staging_.data(), bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    store(moe_layer, p, staging_.data());
  } else {
    store(moe_layer, p, reinterpret_cast<const Bf16*>(bits.data()));
  }
}

// The place stays allocated: marked free (with fewer places than experts, handed to the next expert in).
void CudaExpertStore::drop(int64_t moe_layer, int64_t expert) {
  const int64_t p = place(moe_layer, expert);
  if (capacity_ < num_experts()) layers_[moe_layer].free_places.push_back(static_cast<int32_t>(p));
  set_place(moe_layer, expert, -1);
}

}  // namespace deepinfer
