// Pareto sweeps across a deployment (collective over the world): for each point, the ranks of the swept role
// run warm-up and measured steps in lockstep with their EP groups (bench_decode / bench_prefill with the
// expert-parallel dispatcher); world rank 0 gathers every rank's median and p90 step time, routed-token count and
// the (token, expert) pairs its slots served per MoE layer and expert, and appends one row per point (one per rank,
// and `<phase>/served` rows per rank, layer and expert served: host exchanges only, the NCCL path leaves it empty)
// to the HDF5 file, flushed as it goes.
//  - prefill points: tokens per step per prefill rank (chunks of prompt_len-token prompts);
//  - decode points: concurrent requests per decode rank, each with `context` tokens cached.
// A point's step time is the slowest rank's median (every rank waits for it in the all-to-alls).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/comm/topology.h"
#include "src/model/causal_lm.h"
#include "src/moe/expert_parallel.h"

namespace deepinfer {

struct SweepOptions {
  std::string phase;  // "prefill" or "decode"
  std::vector<int64_t> points;
  int64_t prompt_len = 1024;  // prefill (capped at the chunk)
  int64_t context = 1024;     // decode
  int64_t warmup = 2;
  int64_t steps = 5;
  int64_t num_drafts = 0;     // decode (--nextn): draft tokens per step for the converted figures
  double acceptance = 0.0;    //         their acceptance rate
  // decode: each point also runs with speculative decoding (num_drafts fixed drafts a step from the controlled drafter of
  // mean acceptance `acceptance` and logit spread draft_spread, correctness drawn: step_bench.h's DecodeSpeculation),
  // its measured tokens a step and step time recorded beside the converted figures.
  bool spec_measured = false;
  double draft_spread = 1.0;
  std::string output_path;
  std::string attributes_json;  // the effective configuration, stored as a root attribute (the command sets it)
};

void run_sweep(CausalLm& model, const Topology& topo, ExpertParallelDispatcher& experts, const SweepOptions& options);

}  // namespace deepinfer
