// What one DeepSeek-V4.1 step must cost at least on one H200, per rank, from the model's shape and what the rank
// computes (roofline.h holds the ceilings and StepWork; deepseek_floor.h the V2/V3 form):
//  - bytes read once: every non-expert weight as the checkpoint stores it (FP8 attention projections and shared
//    experts with a ue8m0 scale per 32 x 32 block, the rest bf16), the routed experts the step touches in FP4
//    (e2m1 + a ue8m0 scale per 32), the engram rows fetched, and per sequence and layer the cache the attention
//    reads: the window (FP8 + scales), the indexer's picks among the compressed entries (FP4 + e4m3 scales per 16)
//    and, at an index source, every indexer key it scores (FP4 + ue8m0 per 32; a candidate-masked layer only the
//    candidate blocks') — over the copy bandwidth;
//  - FLOPs: the projections and experts at the FP8 rate (DeepSeek runs them FP8 x FP8 / FP4), the indexer's scores
//    at the FP8 rate too, the sparse attention (window + picks, q.k and p.v over head_dim) at the bf16 rate.
// The floor is the larger of the two times. The expert work is either the uniform expectation of one rank holding
// every expert or what a rank slice's experts were measured to serve (bench --rank-slice).
#pragma once

#include <cstdint>

#include "src/bench/roofline.h"
#include "src/model/model_config.h"

namespace deepinfer {

// A decode step of `batch` sequences at `context` cached tokens each (one new token each).
StepWork v41_decode_work(const ModelConfig& c, int64_t batch, int64_t context, const ExpertWork& experts);
// A prefill step of `prompts` fresh prompts of `prompt_len` tokens (logits of each prompt's last token). With
// `compact_keep_tokens` > 0, bounded replay's compact form: from v41_first_compact_layer on, only each prompt's last
// compact_keep_tokens rows (at least one), their decoder-layer windows floored there. `experts`: per MoE layer,
// averaged over the layers.
StepWork v41_prefill_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ExpertWork& experts,
                          int64_t compact_keep_tokens = 0);

// What a rank holds as the checkpoint stores it: `expert_slots` routed experts a layer, the engram tables' share
// `engram_share` of their rows on the GPU (1: whole, 1 / EP size: split across the group, 0: in host memory), the
// DSpark draft layers where `with_drafts`.
RankWeightBytes v41_rank_weight_bytes(const ModelConfig& c, int64_t expert_slots, double engram_share, bool with_drafts);

// Bytes of the non-expert weights of one decoder layer as stored (what a decode step reads of it), and of one
// routed expert.
double v41_layer_weight_bytes(const ModelConfig& c, int64_t layer);
double v41_expert_bytes(const ModelConfig& c);

}  // namespace deepinfer
