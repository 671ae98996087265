// Single-GPU (or single-CPU) step benchmarks: the median time of a decode or prefill step after warm-up,
// against its floor (roofline.h: deepseek_floor.h for V2/V3, v41_floor.h for V4.1).
//  - decode: `batch` sequences, each with `context` tokens already in the KV cache (fabricated: seeded random
//    latents, admitted with Engine::add_cached), one new token each per step; the context grows by one per step.
//  - prefill: `chunk` tokens per step, made of chunk / prompt_len fresh prompts of prompt_len tokens, each
//    finishing at its first token (V4.1: optionally under bounded decoder replay).
// A step is one Engine::step() — schedule, the forward with sampling, postprocess — the step `generate` runs,
// timed on the host clock (it returns once the sampled tokens are back, so the device work is inside it).
// Greedy sampling with ignore_eos, so no sequence leaves the batch while it is timed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/bench/roofline.h"
#include "src/engine/controlled_drafter.h"
#include "src/engine/engine.h"
#include "src/model/causal_lm.h"

namespace deepinfer {

// Decode with speculative decoding (engine/speculation.h) and the controlled drafter without a reference: every
// verify step's work is real (the rows of each sequence's drafts), while which drafts are accepted is drawn from
// their calibrated confidences (a rank slice's or dummy model's tokens cannot be replayed, so token equality would
// measure nothing). With variable_length, 3 x (num_drafts + 1) untimed steps first measure the cost curve. With
// model_drafter the model's own draft module drafts instead (enabled before), and acceptance is by the
// tokens themselves.
struct DecodeSpeculation {
  int64_t num_drafts = 0;  // 0: plain decode
  bool variable_length = false;
  ControlledDraftOptions drafter;
  int64_t row_quantum = 1;  // SpeculationOptions::verify_row_quantum
  bool model_drafter = false;  // SpeculationOptions::model_drafter (then `drafter` is unused)
  // EngineOptions::overlap_schedule: with the model's DSpark drafter at a fixed length, each draft chained behind its
  // verify step (engine.h).
  bool overlap_schedule = false;
};

// What the timed steps of a speculative point did, per (sequence, step) unless named otherwise.
struct SpeculationPoint {
  int64_t num_drafts = 0;  // 0: not speculative
  bool variable_length = false;
  int64_t row_quantum = 1;
  double mean_drafted = 0, mean_verified = 0, mean_accepted = 0;
  double rows_per_step = 0;         // forward rows per step (sequences + verified drafts)
  double tokens_per_step = 0;       // tokens emitted per step, all sequences
  double calibration_error = 0;     // of the drafter's confidences (SpeculationStats), warm-up steps included
  double mean_acceptance = 0, spread = 0;  // the drafter's
};

struct StepBenchResult {
  std::string phase;     // "decode" or "prefill"
  int64_t batch = 0;     // sequences per step
  int64_t context = 0;   // decode: context length; prefill: prompt length
  int64_t tokens_per_step = 0;
  double median_ms = 0, p90_ms = 0, min_ms = 0;
  double tokens_per_s = 0;
  double floor_ms = 0;
  double floor_over_measured = 0;
  double floor_bytes_ms = -1, floor_flops_ms = -1;  // the floor's two parts: reading its bytes, computing its FLOPs
  int64_t steps = 0;
  double device_idle_ms = -1;  // median device idle before each timed step (negative: not measured)
  int64_t graph_steps = 0;     // timed steps that ran from a captured CUDA graph
  // Prefill under V4.1's bounded decoder replay: the mode and the tokens the decoder layers keep (0: off).
  ReplayOptions replay{};
  SpeculationPoint spec{};  // decode under speculative decoding (tokens_per_s then counts emitted tokens)
};

// The rows each prompt keeps in the decoder layers under bounded replay's compact form (0: another mode).
int64_t compact_keep_tokens(const ReplayOptions& replay);

// The work that floors a step of the model's architecture (v41_floor.h, deepseek_floor.h): a decode step of `rows`
// rows at `context`, a prefill step of `prompts` prompts of `prompt_len` tokens; `experts` per MoE layer.
StepWork decode_floor_work(const ModelConfig& c, int64_t rows, int64_t context, const ExpertWork& experts);
StepWork prefill_floor_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ExpertWork& experts,
                            const ReplayOptions& replay);
// The floor of `r` from its step's work.
void set_floor(StepBenchResult& r, const StepWork& work);

// `experts`: how routed experts are reached (null: all local). Every rank of an expert-parallel group must call
// with the same warmup + steps, so that the exchanges of each step match.
StepBenchResult bench_decode(const CausalLm& model, int64_t batch, int64_t context, int64_t warmup, int64_t steps,
                             ExpertDispatcher* experts = nullptr, const DecodeSpeculation& spec = {});
// `replay`: V4.1's bounded decoder replay (mask: the same work as off, the windows floored; compact: the decoder
// layers compute each prompt's last replay.keep_tokens rows).
StepBenchResult bench_prefill(const CausalLm& model, int64_t chunk, int64_t prompt_len, int64_t warmup, int64_t steps,
                              ExpertDispatcher* experts = nullptr, const ReplayOptions& replay = {});

}  // namespace deepinfer
