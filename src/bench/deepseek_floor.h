// What one DeepSeek-V2/V3 step must cost at least on one H200 (roofline.h), and what one rank holds, from the
// model's shape and the form its weights are held in:
//  - weights as the checkpoint stores them: in an FP8 checkpoint (V3/R1 as shipped) every Linear weight of the
//    decoder layers — attention projections, dense MLPs, shared and routed experts — is e4m3 codes with an fp32
//    scale per block (weight_block_size, 128 x 128 in V3), the rest bf16 (embedding, head, router, norms); or all
//    bf16, which is how the CUDA backend holds an FP8 checkpoint today (dequantised on load);
//  - decode: bytes read once — the non-expert weights, the experts the step touches, every sequence's latent KV
//    (bf16), the embedding rows — over the copy bandwidth; FLOPs — every matrix once per row (FP8 weights at the FP8
//    rate, as DeepSeek runs them), the absorbed MLA attention (per head and cached token: q.k over kv_lora + rope,
//    p.v over kv_lora) at the bf16 rate;
//  - prefill: the same weights once, each token's matrices, causal attention in the expanded form (q.k over
//    qk_head_dim, p.v over v_head_dim), the head for each prompt's last token.
// The MTP layers are left out of the step floors (a draft's cost is the speculation's, not the step's).
#pragma once

#include <cstdint>

#include "src/bench/roofline.h"
#include "src/model/model_config.h"

namespace deepinfer {

enum class WeightForm {
  kAsStored,     // as the checkpoint stores them
  kCudaBackend,  // as the CUDA backend holds them: as stored, but kv_b_proj in bf16 (the absorbed decode reads its
                 // heads' W_uk and W_uv in place)
  kBf16,         // every weight bf16
};

// A rank holding `expert_slots` routed experts in each MoE layer (its share of an EP group's slots, redundant
// replicas included); the MTP layers too where `with_mtp`, their experts whole (as the engine holds them on every
// rank: weights_held_by).
RankWeightBytes deepseek_rank_weight_bytes(const ModelConfig& c, int64_t expert_slots, WeightForm form, bool with_mtp);

// Parameters (values, not bytes) of the whole model, the count model cards give (without the MTP layers unless
// `with_mtp`).
double deepseek_parameter_count(const ModelConfig& c, bool with_mtp = false);

// Bytes of one routed expert (gate, up and down).
double deepseek_expert_bytes(const ModelConfig& c, WeightForm form);

// A decode step of `batch` sequences at `context` cached tokens each (one new token each). `experts`: per MoE layer.
StepWork deepseek_decode_work(const ModelConfig& c, int64_t batch, int64_t context, const ExpertWork& experts,
                              WeightForm form = WeightForm::kAsStored);
// A prefill step of `prompts` fresh prompts of `prompt_len` tokens (logits of each prompt's last token).
StepWork deepseek_prefill_work(const ModelConfig& c, int64_t prompts, int64_t prompt_len, const ExpertWork& experts,
                               WeightForm form = WeightForm::kAsStored);

}  // namespace deepinfer
