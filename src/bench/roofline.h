// What a step must cost at least on one H200 (the floors benchmarks report beside their medians): the ceilings, and
// the two quantities a floor is made of — bytes read once and FLOPs at each tensor-core rate. Each architecture says
// what its step reads and computes: deepseek_floor.h (V2/V3), v41_floor.h (V4.1).
// Ceilings measured on the H200 (2026-11-29): 4.25 TB/s device copy (read + write), 782 TFLOP/s bf16 GEMM.
#pragma once

#include <cstdint>

#include "src/model/model_config.h"

namespace deepinfer {

inline constexpr double kH200CopyBytesPerS = 4.25e12;
inline constexpr double kH200Bf16FlopsPerS = 782e12;
// Hopper's FP8 tensor-core rate is twice its bf16 one; the bf16 rate is the one measured, the FP8 one assumed from it
// (not measured here).
inline constexpr double kH200Fp8FlopsPerS = 2 * 782e12;

// Per MoE layer and step: experts whose weights are read (each at least once) and (token, expert) pairs computed.
struct ExpertWork {
  double experts_touched = 0;
  double pairs = 0;
};

// One rank holding every expert, `tokens` routed uniformly: E (1 - (1 - k/E)^tokens) experts touched, tokens x k pairs.
ExpertWork uniform_expert_work(const ModelConfig& c, int64_t tokens);

// One rank's weights: the non-expert ones (attention and dense layers run data-parallel, so every rank holds them
// whole, with the embedding and the head) and its routed experts.
struct RankWeightBytes {
  double non_expert = 0;
  double experts = 0;
  double total() const { return non_expert + experts; }
};

// A step's work; its floor is the larger of the time to read its bytes and the time to compute its FLOPs.
struct StepWork {
  double bytes = 0;
  double fp8_flops = 0;   // what the model computes FP8 x FP8 (or FP4)
  double bf16_flops = 0;  // the rest (attention among them)
  double floor_ms() const;
  double bytes_ms() const;
  double flops_ms() const;
};

}  // namespace deepinfer
