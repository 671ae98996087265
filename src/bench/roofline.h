// What a step must cost at least on one GPU (the floors), from the model's shape:
//  - decode: bytes it must read once — every weight the step touches (the routed experts the batch is expected
//    to hit, uniformly routed: E (1 - (1 - k/E)^B) per layer), bf16, plus the latent KV of every sequence — over
//    the copy bandwidth;
//  - prefill: FLOPs — 2 x activated parameters per token, plus causal attention — over the bf16 GEMM rate.
// Ceilings measured on the H200 (2026-11-29): 4.25 TB/s device copy (read + write), 782 TFLOP/s bf16 GEMM.
#pragma once

#include <cstdint>

#include "src/model/model_config.h"

namespace deepinfer {

inline constexpr double kH200CopyBytesPerS = 4.25e12;
inline constexpr double kH200Bf16FlopsPerS = 782e12;

struct ParameterCounts {
  double attention_per_layer = 0;  // q, kv_a, kv_b, o projections and their norms
  double dense_mlp = 0;            // one dense layer's MLP
  double moe_shared = 0;           // per MoE layer: router + shared experts
  double expert = 0;               // one routed expert
  double embedding = 0;
  double lm_head = 0;
};
ParameterCounts count_parameters(const ModelConfig& config);

double decode_floor_bytes(const ModelConfig& config, int64_t batch, int64_t context);
double prefill_floor_flops(const ModelConfig& config, int64_t num_prompts, int64_t prompt_len);

}  // namespace deepinfer
