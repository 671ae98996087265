// DeepSeek-V4.1's DSpark drafter on the GPU (cuda_v41_model.h), the CPU model's (v41_dspark.cpp, which states what
// the module computes) with bf16 weights and activations, fp32 streams and logits:
//  - inside every step of the main model (write_draft_keys, from the head block): the target layers' stream means,
//    captured by the hyper-connection block, fused by main_proj and main_norm, and per draft layer the window K = V
//    of every row (wkv, kv_norm, RoPE) written to the draft layer's cache as FP8, like a main layer's window;
//  - dspark_draft: the blocks [last token, noise...] through the draft layers (hyper-connections, a window-only
//    attention whose rows see the draft layer's cached keys before their block and the block's own keys, the MoE
//    of the draft experts), the head's collapse, then per slot the Markov term added to the head's logits, the draw
//    (sample_into_device: the engine's sampling rules, on the draft's own seed) and the confidence head, every slot
//    queued on the device and read back once.
#include <algorithm>
#include <cmath>
#include <iterator>

#include <cublas_v2.h>

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/fake_quant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/hyper_connections.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "kernels/cuda/speculation.cuh"
#include "kernels/cuda/router.cuh"
#include "src/model/v41/cuda/cuda_v41_step.h"
#include "src/model/cuda/device_sampling.h"

namespace deepinfer {

// The blocks' index arrays on the device: the rows are the blocks, sequence after sequence, B rows each.
struct CudaV41Model::DraftPlan {
  int64_t num_tokens = 0, max_blocks = 1;
  const int32_t* positions = nullptr;          // [T] p .. p + B - 1 for a block at p
  const int32_t* inverse_positions = nullptr;  // [T]
  const int32_t* window_ends = nullptr;        // [T] p - 1: the window's last key
  const int32_t* row_tables = nullptr;         // [T, max_blocks] each row's sequence's block table
  const int32_t* extra_offsets = nullptr;      // [T + 1] each row's block keys in extra_ids
  const int32_t* extra_ids = nullptr;          // [T * B] the rows of the row's block
};

void CudaV41Model::load_dspark(const DeviceWeightSource& weights) {
  const ModelConfig& c = config_;
  const V41TextConfig& v = c.v41;
  // Where the weights carry the draft layers (a checkpoint that has them; dummy weights only when asked for:
  // WeightOrigin::dummy_draft_module).
  if (!v.dspark.enabled() || !weights.has("mtp.0.main_proj.weight")) return;
  auto dspark = std::make_unique<Dspark>();
  dspark->moe_config = c;
  dspark->moe_config.n_routed_experts = v.dspark.n_routed_experts;
  dspark->moe_config.num_experts_per_tok = v.dspark.num_experts_per_tok;
  DI_INPUT_CHECK(v.dspark.n_routed_experts <= cuda::kRouteMaxExperts && v.dspark.num_experts_per_tok <= 32,
                 "the CUDA router handles at most {} experts and top-32; the DSpark layers have {} experts, top-{}",
                 cuda::kRouteMaxExperts, v.dspark.n_routed_experts, v.dspark.num_experts_per_tok);
  // Every rank holds the draft experts whole (weights_held_by keeps them), in the main experts' format.
  dspark->experts = std::make_unique<CudaExpertStore>(
      ExpertStore::Dims{v.num_nextn_predict_layers, v.dspark.n_routed_experts, c.hidden_size, c.moe_intermediate_size},
      arena_, num_sms_, static_cast<float>(c.swiglu_limit),
      c.quantization.fp4_experts ? CudaExpertStore::Format::kFp4 : CudaExpertStore::Format::kBf16);
  for (int64_t d = 0; d < v.num_nextn_predict_layers; ++d)
    dspark->layers.push_back(upload_layer(weights, fmt::format("mtp.{}.", d), V41LayerRole{}, *dspark->experts, d,
                                          v.dspark.n_routed_experts));  // window-only layers
  dspark->moe = std::make_unique<CudaMoe>(dspark->moe_config, *dspark->experts, num_sms_, profiler_);
  const std::string last = fmt::format("mtp.{}.", v.num_nextn_predict_layers - 1);  // the heads' layer
  dspark->main_proj = upload(weights, "mtp.0.main_proj.weight");
  dspark->main_norm = upload(weights, "mtp.0.main_norm.weight");
  dspark->hc_head_fn = upload(weights, last + "hc_head_fn");
  dspark->hc_head_base = upload_f32(weights, last + "hc_head_base");
  dspark->hc_head_scale = upload_f32(weights, last + "hc_head_scale");
  dspark->norm = upload(weights, last + "norm.weight");
  dspark->markov_w1 = upload(weights, last + "markov_head.markov_w1.weight");
  dspark->markov_w2 = upload(weights, last + "markov_head.markov_w2.weight");
  dspark->confidence = upload(weights, last + "confidence_head.proj.weight");
  dspark_ = std::move(dspark);
}

void CudaV41Model::enable() {
  if (!dspark_enabled_)  // one window-only layer per draft layer, after the model's
    cache_specs_.insert(cache_specs_.end(), config_.v41.num_nextn_predict_layers, CudaV41KvCache::LayerSpec{});
  dspark_enabled_ = true;
}

void CudaV41Model::write_draft_keys(const StepPlan& plan, const Bf16* features, CudaV41KvCache& cache) const {
  const V41TextConfig& v = config_.v41;
  const int64_t T = plan.num_tokens, H = config_.hidden_size, hd = v.head_dim;
  if (T == 0) return;
  const auto targets = std::ssize(v.dspark.target_layer_ids);
  const float eps = config_.rms_norm_eps;
  auto* fused = scratch_.alloc<Bf16>(T * H);
  linear(features, dspark_->main_proj, fused, false, T, H, targets * H);
  cuda::rms_norm(fused, H, dspark_->main_norm, fused, H, T, H, eps, nullptr);
  auto* kv = scratch_.alloc<Bf16>(T * hd);
  for (int64_t d = 0; d < v.num_nextn_predict_layers; ++d) {
    const Layer& layer = dspark_->layers[d];
    linear(fused, layer.q_kv.rows(v.q_lora_rank, hd), kv, false, T);  // wkv: the stacked projection's last rows
    cuda::rms_norm(kv, hd, layer.kv_norm, kv, hd, T, hd, eps, nullptr);
    rotate(kv + hd - v.qk_rope_head_dim, T, hd, plan.positions, 1, /*compress=*/false);
    const CudaV41KvCache::Layer& window = cache.layer(v.num_hidden_layers + d);
    cuda::write_fp8_kv_rows(kv, hd, plan.new_slots, T, hd, window.codes, window.scales, nullptr);
  }
  profiler_.mark("dspark: draft keys");
}

void CudaV41Model::draft_attention(int64_t d, const DraftPlan& plan, const CudaV41KvCache& cache, const Bf16* h,
                                   Bf16* out) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = dspark_->layers[d];
  const int64_t T = plan.num_tokens, heads = v.num_attention_heads, hd = v.head_dim, width = v.q_lora_rank + hd;
  const QueryAndKv projected = project_query_and_kv(layer, h, T, plan.positions, /*compress=*/false);
  const Bf16 *q = projected.q, *kv = projected.kv;
  // The block's own keys as a cached row would hold them (FP8 values, as the CPU's fake quantisation), in rows of
  // head_dim for the kernel's extras; they are not cached.
  auto* keys = scratch_.alloc<Bf16>(T * hd);
  DI_CUDA_CHECK(cudaMemcpy2DAsync(keys, hd * sizeof(Bf16), kv, width * sizeof(Bf16), hd * sizeof(Bf16), T,
                                  cudaMemcpyDeviceToDevice, cudaStreamPerThread));
  cuda::fake_quant_fp8(keys, T, hd, hd, 32, nullptr);
  const CudaV41KvCache::Layer& window = cache.layer(v.num_hidden_layers + d);
  const cuda::SparseWindowKeys attended{window.codes,      window.scales,        plan.row_tables, plan.max_blocks,
                                        plan.window_ends,  v.sliding_window,     keys,            plan.extra_offsets,
                                        plan.extra_ids,    nullptr};
  auto* attn = scratch_.alloc<Bf16>(T * heads * hd);
  cuda::sparse_window_attention(q, attended, layer.attn_sink, T, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                                attn, nullptr);
  project_output(layer, attn, T, plan.inverse_positions, false, out);
}

CudaV41KvCache& CudaV41Model::draft_cache(KvCache& kv_cache) const {
  DI_CHECK(dspark_enabled_, "a DSpark draft before the drafter was enabled");
  auto* cache = dynamic_cast<CudaV41KvCache*>(&kv_cache);
  DI_CHECK(cache != nullptr && cache->num_layers() == num_cache_layers(), "DSpark needs the model's device cache "
           "made after the drafter was enabled");
  DI_CUDA_CHECK(cudaSetDevice(device_.id()));
  return *cache;
}

std::vector<DraftBlock> CudaV41Model::dspark_draft(const ForwardBatch& anchors, KvCache& kv_cache,
                                                             std::span<const SamplingRow> rows) const {
  CudaV41KvCache& cache = draft_cache(kv_cache);
  const int64_t S = std::ssize(anchors.sequences), T = S * config_.v41.dspark.block_size;
  check_batch(anchors, config_.vocab_size);
  DI_CHECK(std::ssize(anchors.token_ids) == S, "{} DSpark anchors of {} rows", S, anchors.token_ids.size());
  if (S == 0) return {};
  // The step's pools: the main step that came before has finished (its tokens are on the host).
  published_.reset();
  scratch_.reset();
  DraftAnchors blocks;
  for (const SequenceChunk& seq : anchors.sequences) {
    DI_CHECK(seq.num_new == 1, "a DSpark anchor of {} rows", seq.num_new);
    DI_CHECK(seq.swa_floor == 0, "SWA replay after a prefix hit is built for the CPU model only");
    blocks.positions.push_back(seq.num_cached);
    blocks.block_tables.push_back(seq.block_table);
  }
  blocks.tokens = device_copy(published_, anchors.token_ids);
  const DraftOutputs out{published_.alloc<int32_t>(T), published_.alloc<float>(T), published_.alloc<float>(T)};
  queue_draft(blocks, rows, cache, out);
  std::vector<int32_t> drawn(T);
  std::vector<float> score_hidden(T), score_markov(T);
  DI_CUDA_CHECK(cudaMemcpy(drawn.data(), out.drawn, T * sizeof(int32_t), cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(score_markov.data(), out.score_markov, T * sizeof(float), cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(score_hidden.data(), out.score_hidden, T * sizeof(float), cudaMemcpyDeviceToHost));
  idle_.measure();
  std::vector<DraftBlock> drafts = draft_blocks(blocks.positions, drawn.data(), score_hidden.data(), score_markov.data());
  profiler_.report(fmt::format("DSpark: {} blocks of {}", S, config_.v41.dspark.block_size));
  return drafts;
}

void CudaV41Model::start_chained_draft(const ForwardBatch& verify, KvCache& kv_cache,
                                       std::span<const SamplingRow> rows) const {
  CudaV41KvCache& cache = draft_cache(kv_cache);
  const int64_t S = std::ssize(verify.sequences), T = S * config_.v41.dspark.block_size;
  chain_.begin(S);
  // The step's pools: the verify step before has only been queued, but its kernels run before these ones (one stream),
  // and its uploads came from the other half of the pinned staging.
  published_.reset();
  scratch_.reset();
  DraftAnchors blocks;
  for (const SequenceChunk& seq : verify.sequences) {
    DI_CHECK(seq.swa_floor == 0, "SWA replay after a prefix hit is built for the CPU model only");
    blocks.positions.push_back(seq.num_cached + 1);  // after the last token; each accepted draft moves it by one
    blocks.block_tables.push_back(seq.block_table);
  }
  blocks.tokens = chain_.anchors();
  blocks.accepted = chain_.accepted();
  const DraftChain::Outputs out = chain_.outputs(T);
  queue_draft(blocks, rows, cache, {out.tokens, out.score_a, out.score_b});
  chain_.started(std::move(blocks.positions), T);
}

std::vector<DraftBlock> CudaV41Model::finish_chained_draft() const {
  const DraftChain::Results r = chain_.finish();
  idle_.measure();
  return draft_blocks(r.positions, r.tokens, r.score_a, r.score_b);
}

std::vector<DraftBlock> CudaV41Model::draft_blocks(const std::vector<int64_t>& positions,
                                                             const int32_t* drawn, const float* score_hidden,
                                                             const float* score_markov) const {
  const int64_t S = std::ssize(positions), B = config_.v41.dspark.block_size;
  check_drawn_tokens(std::vector<int32_t>(drawn, drawn + S * B), config_.vocab_size);
  std::vector<DraftBlock> drafts(S);
  for (int64_t s = 0; s < S; ++s) drafts[s].position = positions[s];
  for (int64_t k = 0; k < B; ++k) {
    for (int64_t s = 0; s < S; ++s) {
      // The host computes the sigmoid in double (the CPU model's confidence, to the bits of its inputs).
      const double score = static_cast<double>(score_hidden[k * S + s]) + score_markov[k * S + s];
      drafts[s].tokens.push_back(drawn[k * S + s]);
      drafts[s].confidence.push_back(1.0 / (1.0 + std::exp(-std::clamp(score, -60.0, 60.0))));
    }
  }
  return drafts;
}

void CudaV41Model::queue_draft(const DraftAnchors& anchors, std::span<const SamplingRow> rows, CudaV41KvCache& cache,
                               const DraftOutputs& out) const {
  const ModelConfig& c = config_;
  const V41TextConfig& v = c.v41;
  const int64_t H = c.hidden_size, hc = v.hc_mult, B = v.dspark.block_size, vocab = c.vocab_size;
  const int64_t rank = v.dspark.markov_rank, S = std::ssize(anchors.positions), T = S * B;
  const float eps = c.rms_norm_eps;
  DI_CHECK(std::ssize(rows) == S, "{} sampling rows for {} anchors", rows.size(), S);

  // The blocks: each anchor at p followed by B - 1 noise tokens at p + 1 ...; each row sees the window ending at
  // p - 1 and its whole block. With `accepted`, p moves by each sequence's count on the device (its anchor token
  // written there too).
  DraftPlan plan;
  plan.num_tokens = T;
  for (const std::span<const int32_t> table : anchors.block_tables)
    plan.max_blocks = std::max<int64_t>(plan.max_blocks, std::ssize(table));
  std::vector<int32_t> tokens, positions, inverse, ends, tables(T * plan.max_blocks, 0), offsets = {0}, ids;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p = anchors.positions[s];
    DI_CHECK(p >= 1, "a DSpark anchor at position {}", p);
    for (int64_t i = 0; i < B; ++i) {
      const int64_t t = s * B + i;
      tokens.push_back(static_cast<int32_t>(v.dspark.noise_token_id));  // (the anchors' tokens come from the device)
      positions.push_back(static_cast<int32_t>(p + i));
      inverse.push_back(-positions.back());
      ends.push_back(static_cast<int32_t>(p - 1));
      std::copy(anchors.block_tables[s].begin(), anchors.block_tables[s].end(), tables.begin() + t * plan.max_blocks);
      for (int64_t j = 0; j < B; ++j) ids.push_back(static_cast<int32_t>(s * B + j));
      offsets.push_back(static_cast<int32_t>(ids.size()));
    }
  }
  int32_t* d_positions = device_copy(published_, positions);
  int32_t* d_inverse = device_copy(published_, inverse);
  int32_t* d_ends = device_copy(published_, ends);
  int32_t* token_ids = device_copy(published_, tokens);
  plan.positions = d_positions;
  plan.inverse_positions = d_inverse;
  plan.window_ends = d_ends;
  plan.row_tables = device_copy(published_, tables);
  plan.extra_offsets = device_copy(published_, offsets);
  plan.extra_ids = device_copy(published_, ids);
  idle_.record_start();  // (the draft is a step of its own to the idle meter: the host's work since the verify step)
  profiler_.mark("start");
  if (anchors.accepted != nullptr) {
    cuda::shift_draft_rows(anchors.accepted, anchors.tokens, S, B, d_positions, d_inverse, d_ends, token_ids, nullptr);
  } else {
    DI_CUDA_CHECK(cudaMemcpy2DAsync(token_ids, B * sizeof(int32_t), anchors.tokens, sizeof(int32_t), sizeof(int32_t),
                                    S, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
  }

  // The draft layers, as the main layers run (v41_layers.h; the collapse weights of the site before).
  auto* streams = published_.alloc<float>(T * hc * H);
  float* pre = published_.alloc<float>(T * hc);
  float* next_pre = published_.alloc<float>(T * hc);
  auto* post = published_.alloc<float>(T * hc);
  auto* comb = published_.alloc<float>(T * hc * hc);
  auto* h = published_.alloc<Bf16>(T * H);
  auto* layer_out = published_.alloc<Bf16>(T * H);
  cuda::hc_embed(embed_, token_ids, T, hc, H, streams, pre, nullptr);
  const ScratchPool::Mark sublayer = scratch_.mark();
  const auto site = [&](const HyperMix& mix, const Bf16* norm) {
    scratch_.rewind(sublayer);
    hyper_site(mix, norm, T, streams, pre, next_pre, post, comb, h);
    profiler_.mark("dspark: hyper-connections");
  };
  for (int64_t d = 0; d < v.num_nextn_predict_layers; ++d) {
    const Layer& layer = dspark_->layers[d];
    site(layer.hc_attn, layer.attn_norm);
    draft_attention(d, plan, cache, h, layer_out);
    profiler_.mark("dspark: attention");
    cuda::hc_post(streams, layer_out, post, comb, T, hc, H, nullptr);
    site(layer.hc_ffn, layer.ffn_norm);
    dspark_->moe->run(d, layer.moe, h, layer_out, T, nullptr, scratch_, nullptr);
    cuda::hc_post(streams, layer_out, post, comb, T, hc, H, nullptr);
    profiler_.mark("dspark: moe");
  }

  // The head's collapse (its own weights from the flattened streams), its rows put slot by slot (row k * S + s of
  // block s's slot k), so that a slot's logits rows are contiguous.
  scratch_.rewind(sublayer);
  auto* flat = scratch_.alloc<Bf16>(T * hc * H);
  auto* mixes = scratch_.alloc<float>(T * hc);
  cuda::hc_flat_rms_norm(streams, T, hc * H, eps, flat, nullptr);
  linear(flat, dspark_->hc_head_fn, mixes, true, T, hc, hc * H);
  cuda::hc_head_weights(mixes, dspark_->hc_head_base, dspark_->hc_head_scale, T, hc, static_cast<float>(v.hc_eps), pre,
                        nullptr);
  auto* collapsed = scratch_.alloc<Bf16>(T * H);
  cuda::hc_collapse(streams, pre, T, hc, H, collapsed, H, nullptr);
  std::vector<int32_t> by_slot(T);
  for (int64_t k = 0; k < B; ++k)
    for (int64_t s = 0; s < S; ++s) by_slot[k * S + s] = static_cast<int32_t>(s * B + k);
  auto* hidden = scratch_.alloc<Bf16>(T * H);
  cuda::embedding(collapsed, device_copy(scratch_, by_slot), hidden, T, H, nullptr);  // a row gather
  auto* normed = scratch_.alloc<Bf16>(T * H);
  cuda::rms_norm(hidden, H, dspark_->norm, normed, H, T, H, eps, nullptr);
  auto* logits = scratch_.alloc<float>(T * vocab);
  linear(normed, head_, logits, true, T, vocab, H);
  // The confidence head's score w . [h ; W1[x]]: its hidden part for every row now, the Markov part per slot.
  // (one output column: cuBLAS, whatever the row count or flag)
  DI_CUBLAS_CHECK(cuda::linear_bf16(cublas_.get(), hidden, dspark_->confidence, out.score_hidden, true, T, 1, H));
  profiler_.mark("dspark: head collapse, logits, confidence");

  // Per slot, one after the other: the Markov term and the confidence read the token drawn before. The draws stay on
  // the device (slot k's tokens are slot k + 1's Markov rows), so the host queues every slot and waits once, for
  // the tokens and scores of all of them.
  const int32_t* previous = anchors.tokens;
  auto* w1_rows = scratch_.alloc<Bf16>(S * rank);
  auto* markov = scratch_.alloc<float>(S * vocab);
  std::vector<SamplingRow> draws(rows.begin(), rows.end());
  const float one = 1.0f;
  for (int64_t k = 0; k < B; ++k) {
    cuda::embedding(dspark_->markov_w1, previous, w1_rows, S, rank, nullptr);
    linear(w1_rows, dspark_->markov_w2, markov, true, S, vocab, rank);
    float* slot_logits = logits + k * S * vocab;
    DI_CUBLAS_CHECK(cublasSaxpy(cublas_.get(), static_cast<int>(S * vocab), &one, markov, 1, slot_logits, 1));
    DI_CUBLAS_CHECK(cuda::linear_bf16(cublas_.get(), w1_rows, dspark_->confidence + H, out.score_markov + k * S, true,
                                      S, 1, rank));
    for (int64_t s = 0; s < S; ++s) draws[s].position = anchors.positions[s] + k + 1;  // where x_k lands
    sample_into_device(slot_logits, S, vocab, draws, out.drawn + k * S, scratch_, anchors.accepted);
    previous = out.drawn + k * S;
  }
  idle_.record_end();
  profiler_.mark("dspark: Markov term, draws, confidences (every slot)");
}

}  // namespace deepinfer
