// DeepSeek-V4.1's DSpark drafter on the CPU (v41_model.h): the draft layers' keys written by the main forward, and
// the block forward that drafts. What the module computes, as DeepSeek's engine and checkpoint describe it:
//   features(t)  = mean over the streams of the main model's streams entering attention at each target layer,
//                  concatenated over the target layers            [targets * H]
//   fused(t)     = rms_norm(main_proj . features(t)) (main_norm)   [H]
//   key_d(t)     = draft layer d's window K = V of fused(t): wkv, kv_norm, RoPE at t, FP8 (as a window-only layer)
// A block for a sequence whose last token x_0 sits at position p (rows cached below p) is the tokens
// [x_0, noise, ..., noise] at positions p .. p + B - 1. It runs through the draft layers as V4.1 layers do
// (hyper-connections, window-only attention, MoE), except that each block row attends to key_d at the W positions
// before p (W = sliding_window) and to the whole block's own keys (non-causal within the block). Then per slot k-1
// (k = 1..B), with h the streams collapsed by the head's hyper-connection weights (hc_head):
//   logits_k = head(norm(h)) + W2 . W1[x_(k-1)]     (the low-rank Markov term on the token drawn before)
//   x_k      = drawn from logits_k (greedy, or the request's sampling on the draft stream)
//   c_k      = sigmoid(clamp(w . [h ; W1[x_(k-1)]], -60, 60))   (the confidence head, temperature 1)
// The collapse before each draft sublayer follows the main layers' (v41_layers.h): the weights of the site
// before, starting from stream 0 at the embedding.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/hyper_connections.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sparse_attention.h"
#include "src/model/router_params.h"
#include "src/model/v41/v41_model.h"

namespace deepinfer {

namespace {

ExpertStore::Dims draft_expert_dims(const ModelConfig& c) {
  return {c.v41.num_nextn_predict_layers, c.v41.dspark.n_routed_experts, c.hidden_size, c.moe_intermediate_size};
}

}  // namespace

void DeepseekV41Model::load_dspark() {
  const V41TextConfig& v = config_.v41;
  // The optional part is loaded whole or not at all (WeightStore::load): one tensor tells.
  if (!v.dspark.enabled() || weights_.data_or_null("mtp.0.main_proj.weight") == nullptr) return;
  Dspark dspark{{}, HostExpertStore(draft_expert_dims(config_), static_cast<float>(config_.swiglu_limit)),
                nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  dspark.experts.take_from(weights_, [](int64_t d, int64_t e) {
    return routed_expert_tensors(fmt::format("mtp.{}.ffn.experts.{}.", d, e));
  });
  for (int64_t d = 0; d < v.num_nextn_predict_layers; ++d)
    dspark.layers.push_back(resolve_layer(fmt::format("mtp.{}.", d), V41LayerRole{}));  // window-only
  const std::string last = fmt::format("mtp.{}.", v.num_nextn_predict_layers - 1);
  dspark.main_proj = weights_.data("mtp.0.main_proj.weight");
  dspark.main_norm = weights_.data("mtp.0.main_norm.weight");
  dspark.hc_head_fn = weights_.data(last + "hc_head_fn");
  dspark.hc_head_base = weights_.data(last + "hc_head_base");
  dspark.hc_head_scale = weights_.data(last + "hc_head_scale");
  dspark.norm = weights_.data(last + "norm.weight");
  dspark.markov_w1 = weights_.data(last + "markov_head.markov_w1.weight");
  dspark.markov_w2 = weights_.data(last + "markov_head.markov_w2.weight");
  dspark.confidence = weights_.data(last + "confidence_head.proj.weight");
  dspark_ = std::move(dspark);
}

void DeepseekV41Model::enable() {
  if (!dspark_enabled_) add_cache_layers(config_.v41.num_nextn_predict_layers);  // one key per row and draft layer
  dspark_enabled_ = true;
}

void DeepseekV41Model::write_draft_keys(const ForwardBatch& batch, const std::vector<int32_t>& positions,
                                        const float* features, MlaKvCache& cache) const {
  const V41TextConfig& v = config_.v41;
  const int64_t T = batch.num_tokens(), H = config_.hidden_size, hd = v.head_dim;
  const auto targets = static_cast<int64_t>(v.dspark.target_layer_ids.size());
  std::vector<float> fused(T * H), kv(T * hd);
  cpu::linear(features, dspark_->main_proj, nullptr, fused.data(), T, H, targets * H);
  cpu::rms_norm(fused.data(), dspark_->main_norm, fused.data(), T, H, config_.rms_norm_eps);
  for (int64_t d = 0; d < v.num_nextn_predict_layers; ++d) {
    project_window_kv(dspark_->layers[d], fused.data(), T, positions.data(), /*compress=*/false, kv.data());
    int64_t t = 0;
    for (const SequenceChunk& seq : batch.sequences)
      for (int64_t i = 0; i < seq.num_new; ++i, ++t)
        std::copy_n(kv.data() + t * hd, hd, cache.entry(v.num_hidden_layers + d, seq.block_table, seq.num_cached + i));
  }
}

void DeepseekV41Model::draft_attention(int64_t d, const ForwardBatch& blocks, const std::vector<int32_t>& positions,
                                       const float* x, float* out, const MlaKvCache& cache) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = dspark_->layers[d];
  const int64_t T = blocks.num_tokens(), heads = v.num_attention_heads, hd = v.head_dim;
  std::vector<float> q_residual(T * v.q_lora_rank), q(T * heads * hd), kv(T * hd), attn(T * heads * hd);
  project_query(layer, x, T, positions.data(), false, q_residual.data(), q.data());
  project_window_kv(layer, x, T, positions.data(), false, kv.data());

  // Each row: the window ending just before its block (the row's "position" p - 1 for the window), then every
  // row of its block as the extras.
  int64_t max_blocks = 1;
  for (const SequenceChunk& seq : blocks.sequences)
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seq.block_table.size()));
  std::vector<int32_t> tables(T * max_blocks, 0), window_end(T), floors(T, 0), offsets(T + 1, 0), ids;
  bool floored = false;
  int64_t first = 0;
  for (const SequenceChunk& seq : blocks.sequences) {
    DI_CHECK(seq.num_cached >= 1, "a DSpark block at position {}: nothing before it to attend", seq.num_cached);
    for (int64_t i = 0; i < seq.num_new; ++i) {
      const int64_t t = first + i;
      std::copy(seq.block_table.begin(), seq.block_table.end(), tables.begin() + t * max_blocks);
      window_end[t] = static_cast<int32_t>(seq.num_cached - 1);
      floors[t] = static_cast<int32_t>(seq.swa_floor);
      floored = floored || seq.swa_floor > 0;
      for (int64_t j = 0; j < seq.num_new; ++j) ids.push_back(static_cast<int32_t>(first + j));
      offsets[t + 1] = static_cast<int32_t>(ids.size());
    }
    first += seq.num_new;
  }
  const cpu::SparseWindowKeys keys{cache.layer_entries(v.num_hidden_layers + d), cache.entry_dim(), tables.data(),
                                   max_blocks, window_end.data(), v.sliding_window, kv.data(), offsets.data(),
                                   ids.data(), floored ? floors.data() : nullptr};
  cpu::sparse_window_attention(q.data(), keys, layer.attn_sink, T, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                               attn.data());
  project_output(layer, attn.data(), T, positions.data(), false, out);
}

std::vector<DraftBlock> DeepseekV41Model::dspark_draft(const ForwardBatch& anchors, KvCache& kv_cache,
                                                       std::span<const SamplingRow> rows) const {
  DI_CHECK(dspark_enabled_, "dspark_draft before the DSpark drafter was enabled");
  const MlaKvCache& cache = host_cache(kv_cache);
  const V41TextConfig& v = config_.v41;
  const int64_t H = config_.hidden_size, hc = v.hc_mult, B = v.dspark.block_size;
  const int64_t vocab = config_.vocab_size, rank = v.dspark.markov_rank;
  check_batch(anchors, vocab);
  DI_CHECK(rows.size() == anchors.sequences.size(), "{} sampling rows for {} anchors", rows.size(),
           anchors.sequences.size());
  // The blocks: each anchor followed by block - 1 noise tokens.
  ForwardBatch blocks;
  for (size_t s = 0; s < anchors.sequences.size(); ++s) {
    DI_CHECK(anchors.sequences[s].num_new == 1, "a DSpark anchor of {} rows", anchors.sequences[s].num_new);
    blocks.token_ids.push_back(anchors.token_ids[s]);
    blocks.token_ids.insert(blocks.token_ids.end(), B - 1, static_cast<int32_t>(v.dspark.noise_token_id));
    blocks.sequences.push_back(anchors.sequences[s]);
    blocks.sequences.back().num_new = B;
  }
  const int64_t T = blocks.num_tokens();
  const std::vector<int32_t> positions = blocks.positions();
  const float eps = config_.rms_norm_eps;

  // The draft layers over the blocks, as the main layers run (v41_layers.h).
  std::vector<float> streams(T * hc * H), pre(T * hc), next_pre(T * hc), post(T * hc), comb(T * hc * hc);
  std::vector<float> h(T * H), out(T * H);
  cpu::hc_embed(embed_, blocks.token_ids.data(), T, hc, H, streams.data(), pre.data());
  cpu::RouterParams router = router_params(config_, nullptr);
  router.num_experts = v.dspark.n_routed_experts;
  router.top_k = v.dspark.num_experts_per_tok;
  router.normalize = config_.norm_topk_prob && router.top_k > 1;
  const auto site = [&](const HyperMix& mix, const float* norm) {
    hyper_mixes(mix, streams.data(), T, next_pre.data(), post.data(), comb.data());
    cpu::hc_collapse_rms_norm(streams.data(), pre.data(), norm, T, hc, H, eps, h.data());
    std::swap(pre, next_pre);
  };
  for (int64_t d = 0; d < v.num_nextn_predict_layers; ++d) {
    const Layer& layer = dspark_->layers[d];
    site(layer.hc_attn, layer.attn_norm);
    draft_attention(d, blocks, positions, h.data(), out.data(), cache);
    cpu::hc_post(streams.data(), out.data(), post.data(), comb.data(), T, hc, H);
    site(layer.hc_ffn, layer.ffn_norm);
    router.correction_bias = layer.router_bias;
    moe_block(layer, dspark_->experts, d, router, h.data(), out.data(), T, nullptr);
    cpu::hc_post(streams.data(), out.data(), post.data(), comb.data(), T, hc, H);
  }
  // The head's collapse: its own weights from the flattened streams, pre = sigmoid(scale m + base) + hc_eps.
  std::vector<float> flat(T * hc * H), mixes(T * hc), hidden(T * H), normed(T * H), logits(T * vocab);
  cpu::hc_flat_rms_norm(streams.data(), T, hc * H, eps, flat.data());
  cpu::linear(flat.data(), dspark_->hc_head_fn, nullptr, mixes.data(), T, hc, hc * H);
  cpu::hc_head_weights(mixes.data(), dspark_->hc_head_base, dspark_->hc_head_scale, T, hc, static_cast<float>(v.hc_eps),
                       pre.data());
  cpu::hc_collapse(streams.data(), pre.data(), T, hc, H, hidden.data());
  cpu::rms_norm(hidden.data(), dspark_->norm, normed.data(), T, H, eps);
  cpu::linear(normed.data(), head_, nullptr, logits.data(), T, vocab, H);

  // Per block, the drafts one after the other: the Markov term and the confidence read the token drawn before.
  std::vector<DraftBlock> drafts(blocks.sequences.size());
  std::vector<float> markov(vocab);
  for (size_t s = 0; s < blocks.sequences.size(); ++s) {
    const int64_t first = static_cast<int64_t>(s) * B;
    drafts[s].position = anchors.sequences[s].num_cached;
    int32_t previous = blocks.token_ids[first];
    for (int64_t k = 1; k <= B; ++k) {
      const int64_t t = first + k - 1;
      const float* w1 = dspark_->markov_w1 + static_cast<int64_t>(previous) * rank;
      cpu::linear(w1, dspark_->markov_w2, nullptr, markov.data(), 1, vocab, rank);
      float* row = logits.data() + t * vocab;
      for (int64_t i = 0; i < vocab; ++i) row[i] += markov[i];
      double score = 0;
      for (int64_t i = 0; i < H; ++i) score += static_cast<double>(dspark_->confidence[i]) * hidden[t * H + i];
      for (int64_t r = 0; r < rank; ++r) score += static_cast<double>(dspark_->confidence[H + r]) * w1[r];
      SamplingRow draw = rows[s];
      draw.position = positions[t] + 1;  // where x_k lands
      int32_t token = 0;
      cpu::sample_rows(row, 1, vocab, &draw, &token);
      drafts[s].tokens.push_back(token);
      drafts[s].confidence.push_back(1.0 / (1.0 + std::exp(-std::clamp(score, -60.0, 60.0))));
      previous = token;
    }
  }
  return drafts;
}

}  // namespace deepinfer
