// The CPU blocks of the V4.1 layer loop (v41_layers.h), which DeepseekV41Model::forward instantiates with them: the
// hc_mult residual streams in fp32, the hyper-connection sites, engram, attention and MoE through the model's
// members, bounded replay's compaction, and DSpark's features for the draft layers' keys.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/cpu/engram.h"
#include "kernels/cpu/hyper_connections.h"
#include "kernels/cpu/ops.h"
#include "src/model/engram_hash.h"
#include "src/model/v41/v41_layers.h"
#include "src/model/v41/v41_model.h"

namespace deepinfer {

struct DeepseekV41Model::CpuBlocks {
  const DeepseekV41Model& model;
  const ForwardBatch* batch;               // the step's rows, or after compaction the kept ones
  const std::vector<int32_t>* positions;
  MlaKvCache& cache;
  ExpertDispatcher* dispatcher;
  int64_t T, H, hc;
  std::vector<float> streams = std::vector<float>(T * hc * H);  // [T, hc, H]
  // The collapse weights of the next pre (the previous site's mixes; the first collapse takes stream 0), and
  // the current site's own, which the site after it uses.
  std::vector<float> pre = std::vector<float>(T * hc), next_pre = std::vector<float>(T * hc);
  std::vector<float> post = std::vector<float>(T * hc), comb = std::vector<float>(T * hc * hc);
  std::vector<float> collapsed = std::vector<float>(T * H), h = std::vector<float>(T * H);
  std::vector<float> out = std::vector<float>(T * H);
  std::vector<SequenceState> states = std::vector<SequenceState>(batch->sequences.size());
  // [engram layers, T, columns]: every engram layer's table rows for the step, hashed once.
  std::vector<int64_t> engram_rows = model.config_.v41.engram_layer_ids.empty()
                                         ? std::vector<int64_t>{}
                                         : deepinfer::engram_rows(model.config_.v41, *batch);

  // DSpark (enabled): per row, the streams entering attention at each target layer, averaged over the streams
  // [T, targets, H]; the draft layers' keys come from them (write_draft_keys).
  const std::vector<int64_t>& targets = model.config_.v41.dspark.target_layer_ids;
  std::vector<float> features = model.dspark_enabled_ ? std::vector<float>(T * targets.size() * H) : std::vector<float>{};

  ForwardBatch compacted = {};  // bounded replay's compact form: the kept rows from its first layer on
  std::vector<int32_t> compacted_positions = {};

  void embed() { cpu::hc_embed(model.embed_, batch->token_ids.data(), T, hc, H, streams.data(), pre.data()); }
  const int64_t compact_layer = v41_first_compact_layer(model.config_.v41);
  void begin_layer(int64_t l) {
    if (batch->compact_replay && l == compact_layer) compact();
  }
  // Keeps each sequence's rows at or above its replay floor (at least its last row), with everything the
  // remaining layers read per row: the streams, the next collapse weights, the engram rows, the indexer's picks.
  void compact() {
    DI_CHECK(!batch->all_logits, "bounded replay's compact form gives the logits of each sequence's last row only");
    const std::vector<int64_t> kept = batch->keep_replay_rows(compacted);
    for (size_t s = 0; s < batch->sequences.size(); ++s) {
      const int64_t from = compacted.sequences[s].num_cached - batch->sequences[s].num_cached;
      for (auto* per_row : {&states[s].selected, &states[s].candidates})
        if (!per_row->empty()) per_row->erase(per_row->begin(), per_row->begin() + from);
    }
    const auto keep_rows = [&](std::vector<float>& rows, int64_t width) {
      for (size_t i = 0; i < kept.size(); ++i)
        std::copy_n(rows.begin() + kept[i] * width, width, rows.begin() + static_cast<int64_t>(i) * width);
      rows.resize(kept.size() * width);
    };
    keep_rows(streams, hc * H);
    keep_rows(pre, hc);
    if (!features.empty()) keep_rows(features, static_cast<int64_t>(targets.size()) * H);
    const int64_t cols = v41_engram_columns(model.config_.v41), layers = T > 0 ? engram_rows.size() / (T * cols) : 0;
    std::vector<int64_t> rows;
    for (int64_t e = 0; e < layers; ++e)
      for (const int64_t t : kept) rows.insert(rows.end(), engram_rows.begin() + (e * T + t) * cols,
                                               engram_rows.begin() + (e * T + t + 1) * cols);
    engram_rows = std::move(rows);
    T = static_cast<int64_t>(kept.size());
    for (auto* scratch : {&next_pre, &post}) scratch->resize(T * hc);
    comb.resize(T * hc * hc);
    for (auto* scratch : {&collapsed, &h, &out}) scratch->resize(T * H);
    compacted_positions = compacted.positions();
    batch = &compacted;
    positions = &compacted_positions;
  }
  void engram(int64_t l) {
    const Layer& layer = model.layers_[l];
    if (layer.engram_index < 0) return;
    const V41TextConfig& v = model.config_.v41;
    const int64_t cols = v41_engram_columns(v), ed = v.engram_head_dim;
    std::vector<float> gathered(T * cols * ed), kv(T * (hc + 1) * H);
    model.gather_engram_rows(layer, engram_rows.data() + layer.engram_index * T * cols, T * cols, dispatcher,
                             gathered.data());
    cpu::linear(gathered.data(), layer.engram_wkv, nullptr, kv.data(), T, (hc + 1) * H, cols * ed);
    cpu::engram_mix(streams.data(), kv.data(), layer.engram_q, layer.engram_k, T, hc, H,
                    model.config_.rms_norm_eps);
  }
  void hc_pre(int64_t l, HyperSite site) {
    const Layer& layer = model.layers_[l];
    const bool attn = site == HyperSite::kAttention;
    if (attn && !features.empty()) capture_features(l);
    model.hyper_mixes(attn ? layer.hc_attn : layer.hc_ffn, streams.data(), T, next_pre.data(), post.data(),
                      comb.data());
    cpu::hc_collapse_rms_norm(streams.data(), pre.data(), attn ? layer.attn_norm : layer.ffn_norm, T, hc, H,
                              model.config_.rms_norm_eps, h.data());
    std::swap(pre, next_pre);
  }
  void capture_features(int64_t l) {
    const auto target = std::find(targets.begin(), targets.end(), l);
    if (target == targets.end()) return;
    const int64_t n = static_cast<int64_t>(targets.size()), j = target - targets.begin();
    for (int64_t t = 0; t < T; ++t) {
      float* f = features.data() + (t * n + j) * H;
      std::fill_n(f, H, 0.0f);
      for (int64_t k = 0; k < hc; ++k) cpu::axpy(1.0f, streams.data() + (t * hc + k) * H, f, H);
      for (int64_t i = 0; i < H; ++i) f[i] /= static_cast<float>(hc);
    }
  }
  void attention(int64_t l) { model.attention(l, *batch, *positions, h.data(), out.data(), cache, states); }
  void moe(int64_t l) { model.moe(l, h.data(), out.data(), T, dispatcher); }
  // streams_k <- post_k * out + sum_j comb[j, k] * streams_j
  void hc_post() { cpu::hc_post(streams.data(), out.data(), post.data(), comb.data(), T, hc, H); }
  Tensor head() {
    if (!features.empty()) model.write_draft_keys(*batch, *positions, features.data(), cache);
    cpu::hc_collapse(streams.data(), pre.data(), T, hc, H, collapsed.data());
    return cpu_final_logits(*batch, collapsed.data(), model.final_norm_, model.head_, H, model.config_.vocab_size,
                            model.config_.rms_norm_eps);
  }
};

}  // namespace deepinfer
