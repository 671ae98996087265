// The CUDA blocks of the V4.1 layer loop (v41_layers.h), which CudaV41Model::run_to_logits instantiates with them:
// device work on this thread's stream over the step's plan and published state (cuda_v41_step.h): the streams'
// hyper-connection sites (fused into one launch where fuses_hc_sites), engram, attention and MoE through the model's
// members, bounded replay's compaction, and DSpark's features for the draft layers' keys.
#pragma once

#include <optional>
#include <vector>

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/engram.cuh"
#include "kernels/cuda/hyper_connections.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "src/model/v41/cuda/cuda_v41_model.h"
#include "src/model/v41/cuda/cuda_v41_step.h"
#include "src/model/v41/v41_layers.h"

namespace deepinfer {

struct CudaV41Model::CudaBlocks {
  const CudaV41Model& model;
  const ForwardBatch& batch;
  const StepPlan* plan;  // the step's, or after compaction the kept rows'
  StepState* state;
  CudaV41KvCache& cache;
  ExpertDispatcher* dispatcher;
  ScratchPool& scratch;
  int64_t T, H, hc;
  // DSpark (enabled): per row the streams entering attention at each target layer, averaged over the streams
  // [T, targets, H] (in the step's published pool); null otherwise.
  Bf16* features = nullptr;
  ScratchPool::Mark sublayer{};
  // A sublayer's hc_post left for the next site to run in its launch (fuses_hc_sites(T)); whatever reads the streams
  // before that site runs it alone first (run_pending_post).
  bool post_pending = false;
  // Bounded replay's compact form: the kept rows' batch, plan and state from its first layer on.
  const int64_t compact_layer = v41_first_compact_layer(model.config_.v41);
  ForwardBatch kept_batch{};
  std::optional<StepPlan> kept_plan{};
  std::optional<StepState> kept_state{};

  const V41TextConfig& v() const { return model.config_.v41; }
  void begin_layer(int64_t l) {
    if (batch.compact_replay && l == compact_layer) compact();
  }
  void run_pending_post() {
    if (!post_pending) return;
    cuda::hc_post(state->streams, state->out, state->post, state->comb, T, hc, H, nullptr);
    post_pending = false;
  }
  // Keeps each sequence's rows at or above its replay floor (at least its last row), as the CPU model does: the
  // remaining layers (past every KV source and the candidate source) compute only those.
  void compact() {
    run_pending_post();
    DI_CHECK(!batch.all_logits, "bounded replay's compact form gives the logits of each sequence's last row only");
    const std::vector<int64_t> kept = batch.keep_replay_rows(kept_batch);
    if (static_cast<int64_t>(kept.size()) == T) return;  // nothing below a floor (a decode-shaped step)
    kept_plan.emplace(*plan, kept_batch, kept, v(), model.layers_, model.published_);
    const int64_t* kept_rows = device_copy(model.published_, kept);
    kept_state.emplace(*state, *kept_plan, kept_rows, v(), H, model.published_);
    if (features != nullptr) {  // the target layers captured so far, the kept rows'
      const auto row_bytes = static_cast<int64_t>(v().dspark.target_layer_ids.size() * H * sizeof(Bf16));
      auto* kept_features = model.published_.alloc<Bf16>(kept.size() * v().dspark.target_layer_ids.size() * H);
      cuda::gather_byte_rows(reinterpret_cast<const uint8_t*>(features), row_bytes, kept_rows,
                             static_cast<int64_t>(kept.size()), reinterpret_cast<uint8_t*>(kept_features), row_bytes,
                             nullptr);
      features = kept_features;
    }
    plan = &*kept_plan;
    state = &*kept_state;
    T = kept_plan->num_tokens;
    model.profiler_.mark("bounded replay: compact");
  }
  void embed() {
    cuda::hc_embed(model.embed_, plan->token_ids, T, hc, H, state->streams, state->pre, nullptr);
    sublayer = scratch.mark();
  }
  void engram(int64_t l) {
    const Layer& layer = model.layers_[l];
    if (layer.engram_index < 0) return;
    run_pending_post();
    scratch.rewind(sublayer);
    const V41TextConfig& v = model.config_.v41;
    const int64_t cols = v41_engram_columns(v), ed = v.engram_head_dim;
    auto* gathered = scratch.alloc<Bf16>(T * cols * ed);
    auto* kv = scratch.alloc<float>(T * (hc + 1) * H);
    const int32_t* rows = plan->engram_rows + layer.engram_index * T * cols;
    const bool fetched = !v.engram_shard.whole();  // then the plan holds the step's rows, in order
    if (layer.engram_codes != nullptr)
      cuda::gather_fp8_kv_rows(fetched ? plan->fetched_engram_codes : layer.engram_codes,
                               fetched ? plan->fetched_engram_scales : layer.engram_scales, rows, T * cols, ed, gathered,
                               ed, nullptr);
    else
      cuda::embedding(fetched ? plan->fetched_engram_values : layer.engram_table, rows, gathered, T * cols, ed,
                      nullptr);  // a row gather
    model.linear(gathered, layer.engram_wkv, kv, true, T, (hc + 1) * H, cols * ed);
    cuda::engram_mix(state->streams, kv, layer.engram_q, layer.engram_k, T, hc, H, model.config_.rms_norm_eps,
                     nullptr);
    model.profiler_.mark("engram");
  }
  void hc_pre(int64_t l, HyperSite site) {
    scratch.rewind(sublayer);  // stream order: the previous sublayer's kernels are queued before these
    const Layer& layer = model.layers_[l];
    const bool attn = site == HyperSite::kAttention;
    if (attn && features != nullptr) {
      const std::vector<int64_t>& targets = v().dspark.target_layer_ids;
      const auto j = std::find(targets.begin(), targets.end(), l) - targets.begin();
      if (j < std::ssize(targets)) {
        run_pending_post();
        cuda::hc_collapse(state->streams, nullptr, T, hc, H, features + j * H, std::ssize(targets) * H, nullptr);
      }
    }
    model.hyper_site(attn ? layer.hc_attn : layer.hc_ffn, attn ? layer.attn_norm : layer.ffn_norm, T, state->streams,
                     state->pre, state->next_pre, state->post, state->comb, state->h,
                     post_pending ? state->out : nullptr);
    post_pending = false;
    model.profiler_.mark("hyper-connections pre");
  }
  void attention(int64_t l) {
    model.attention(l, *plan, *state, cache.layer(l), state->h, state->out);
  }
  void moe(int64_t l) {
    model.moe_->run(l, model.layers_[l].moe, state->h, state->out, T, dispatcher, scratch, nullptr);
    model.profiler_.mark("moe");
  }
  void hc_post() {
    if (model.fuses_hc_sites(T)) {
      post_pending = true;
      return;
    }
    cuda::hc_post(state->streams, state->out, state->post, state->comb, T, hc, H, nullptr);
    model.profiler_.mark("hyper-connections post");
  }
  float* head() {
    run_pending_post();
    scratch.rewind(sublayer);
    if (features != nullptr) model.write_draft_keys(*plan, features, cache);
    const int64_t R = plan->num_rows, vocab = model.config_.vocab_size;
    auto* normed = scratch.alloc<Bf16>(T * H);
    cuda::hc_collapse_rms_norm(state->streams, state->pre, model.final_norm_, T, hc, H, model.config_.rms_norm_eps,
                               normed, nullptr);
    auto* selected = scratch.alloc<Bf16>(R * H);
    cuda::embedding(normed, plan->row_ids, selected, R, H, nullptr);  // a row gather
    auto* logits = scratch.alloc<float>(R * vocab);
    model.linear(selected, model.head_, logits, true, R, vocab, H);
    model.profiler_.mark("final collapse+norm+head");
    return logits;
  }
};

}  // namespace deepinfer
