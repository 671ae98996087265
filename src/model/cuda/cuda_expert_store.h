// The CUDA backend's routed experts: per MoE layer `capacity` places allocated once (every expert, or the rank's
// EP slots), the kernels indexing them by place. Holding every expert, expert e is at place e; holding fewer, an
// expert takes a free place when loaded or imported and gives it back when dropped (EPLB only fills or frees
// places), and kernels reading logical ids remap them first (device_places: place, or capacity where not held).
// Three formats:
//  - bf16: one gate_up array [E, 2I, H] (each expert's gate rows, then its up rows) and one down array [E, H, I];
//  - fp4 (DeepSeek-V4's checkpoints): the same rows as e2m1 codes with a ue8m0 scale per 32 values
//    (kernels/cuda/moe_fp4.cuh), quantised on the device when loaded; 0.53 bytes a weight instead of 2. Values
//    that are FP4 already (a checkpoint's, dequantised on load) quantise back to themselves.
//  - fp8 (DeepSeek-V3's checkpoints): the same rows as e4m3 codes with an fp32 scale a block x block tile
//    (kernels/cuda/moe_fp8.cuh), a checkpoint's codes and scales as stored (else quantised on the device, scale =
//    amax / 448); 1 byte a weight and 4 a tile.
#pragma once

#include <cuda_bf16.h>

#include <vector>

#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/cuda/moe_fp8.cuh"
#include "src/core/device_array.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_memory.h"
#include "src/model/cuda/weight_source.h"
#include "src/model/expert_store.h"

namespace deepinfer {

class CudaExpertStore final : public ExpertStore {
 public:
  enum class Format { kBf16, kFp4, kFp8 };
  // Allocates the arrays in `arena` (on the current device) for `capacity` experts a layer (0 or more than the
  // experts: all of them). swiglu_limit: the experts' SwiGLU clamp (0: none). fp8_block: the fp8 format's tile
  // (hidden and intermediate sizes multiples of it).
  CudaExpertStore(Dims dims, DeviceArena& arena, int num_sms, float swiglu_limit, Format format = Format::kBf16,
                  int64_t capacity = 0, int64_t fp8_block = 0);

  // Fills one expert from the checkpoint's gate, up and down tensors.
  void load(int64_t moe_layer, int64_t expert, const DeviceWeightSource& weights, const std::string& gate,
            const std::string& up, const std::string& down);
  Format format() const { return format_; }
  // Places a layer (num_experts() when every expert is held, and then expert e is at place e).
  int64_t capacity() const { return capacity_; }
  // [num_experts]: each expert's place in `moe_layer`, or capacity() where not held (on the device).
  const int32_t* device_places(int64_t moe_layer) const { return layers_[moe_layer].device_places.data(); }
  // bf16 only.
  const __nv_bfloat16* gate_up(int64_t moe_layer) const { return layers_[moe_layer].gate_up; }
  const __nv_bfloat16* down(int64_t moe_layer) const { return layers_[moe_layer].down; }
  // fp4 only: the expert at place p has its gate_up rows from row p * 2I, its down rows from row p * H.
  cuda::Fp4Rows gate_up_fp4(int64_t moe_layer) const { return layers_[moe_layer].gate_up_fp4; }
  cuda::Fp4Rows down_fp4(int64_t moe_layer) const { return layers_[moe_layer].down_fp4; }
  // fp8 only: the same places' rows as codes with their tiles' scales.
  cuda::Fp8Rows gate_up_fp8(int64_t moe_layer) const { return layers_[moe_layer].gate_up_fp8; }
  cuda::Fp8Rows down_fp8(int64_t moe_layer) const { return layers_[moe_layer].down_fp8; }
  bool quantized() const { return format_ != Format::kBf16; }
  int64_t fp8_block() const { return fp8_block_; }
  // fp4 and fp8: places [first, first + count) dequantised into gate_up [count, 2I, H] and down [count, H, I], on
  // the model's stream (the prefill GEMMs read them).
  void dequantize(int64_t moe_layer, int64_t first, int64_t count, __nv_bfloat16* gate_up, __nv_bfloat16* down) const;
  size_t bytes_per_expert() const;

  bool holds(int64_t moe_layer, int64_t expert) const override;
  // Host rows through the device (expert parallelism over host memory): upload, the MLP kernels, download.
  void compute(int64_t moe_layer, int64_t expert, const float* x, int64_t n, float* out) const override;
  std::vector<float> export_weights(int64_t moe_layer, int64_t expert) const override;
  void import_weights(int64_t moe_layer, int64_t expert, std::span<const float> weights) override;
  void drop(int64_t moe_layer, int64_t expert) override;

 private:
  struct Layer {
    __nv_bfloat16 *gate_up = nullptr, *down = nullptr;  // bf16
    cuda::Fp4Rows gate_up_fp4, down_fp4;                // fp4
    cuda::Fp8Rows gate_up_fp8, down_fp8;                // fp8
    std::vector<int32_t> place_of;                      // [expert]: its place, -1 where not held
    std::vector<int32_t> free_places;                   // fewer places than experts: the unused ones
    DeviceArray<int32_t> device_places;                 // place_of on the device, capacity where not held
  };
  // The place of a held expert (checked).
  int64_t place(int64_t moe_layer, int64_t expert) const;
  // A place for `expert` (its own when every expert is held), marked held.
  int64_t acquire(int64_t moe_layer, int64_t expert);
  void set_place(int64_t moe_layer, int64_t expert, int32_t place);
  // fp8: a place's rows in the gate_up / down arrays (codes and scales).
  uint8_t* fp8_codes(const cuda::Fp8Rows& rows, int64_t first_row, int64_t cols) const;
  float* fp8_scales(const cuda::Fp8Rows& rows, int64_t first_row, int64_t cols) const;
  // One expert as bf16 rows: its slots, or (fp4, fp8) dequantised into staging_ (valid until the next call).
  DeviceMlp expert_mlp(int64_t moe_layer, int64_t expert) const;
  // Stores bf16 rows [gate | up | down] at a place on the device (fp4, fp8: quantised).
  void store(int64_t moe_layer, int64_t place, const __nv_bfloat16* rows);

  int num_sms_;
  float swiglu_limit_;
  Format format_;
  int64_t capacity_;
  int64_t fp8_block_;
  std::vector<Layer> layers_;  // the arrays, in the arena
  CublasHandle cublas_;
  mutable DeviceArray<__nv_bfloat16> staging_;  // one expert's bf16 rows (fp4 loads, exports, compute)
  mutable ScratchPool scratch_;  // compute() runs inside a step, beside the step's own scratch
};

}  // namespace deepinfer
