// V4.1 attention: the sliding window of raw K=V, the shared compressed KV of the layer's group and the sparse
// indexer that picks, per query, which compressed entries it sees. See v41_model.h for the caching scheme.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sparse_attention.h"
#include "src/model/v41/v41_model.h"

namespace deepinfer {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

void DeepseekV41Model::publish_compressed(int64_t layer_idx, const SequenceChunk& seq, const MlaKvCache& cache,
                                          SequenceState& state) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = layers_[layer_idx];
  const int64_t hd = v.head_dim, r = layer.ratio;
  const int64_t groups = (seq.num_cached + seq.num_new) / r;  // a partial last group waits for its tokens
  std::vector<float> latent(groups * hd);
  if (r == 1) {
    for (int64_t g = 0; g < groups; ++g)  // already normalised
      std::copy_n(cache.entry(layer_idx, seq.block_table, g) + hd, hd, latent.data() + g * hd);
  } else {
    // Gated pooling: per channel, a softmax over the group's gate values weights its projections.
    cpu::compress_pool(cache.layer_entries(layer_idx), cache.entry_dim(), seq.block_table.data(), groups, r, hd,
                       /*kv_offset=*/hd, /*gate_offset=*/2 * hd, latent.data());
  }
  if (r > 1) cpu::rms_norm(latent.data(), layer.compressor_norm, latent.data(), groups, hd, config_.rms_norm_eps);
  std::vector<int32_t> group_positions(groups);
  for (int64_t g = 0; g < groups; ++g) group_positions[g] = static_cast<int32_t>(g * r);

  if (layer.owns_index_keys) {  // the group's indexer keys, from the latents before their RoPE
    const int64_t id = v.index_head_dim;
    state.index_keys.assign(groups * id, 0.0f);
    cpu::linear(latent.data(), layer.indexer_wk, nullptr, state.index_keys.data(), groups, id, hd);
    cpu::rms_norm(state.index_keys.data(), layer.indexer_k_norm, state.index_keys.data(), groups, id,
                  config_.rms_norm_eps);
    rotate(state.index_keys.data(), groups, 1, id, group_positions.data(), true, false);
    cpu::fake_quant_fp4(state.index_keys.data(), groups, id, 32, /*e4m3_scales=*/false);
    state.num_index_keys = groups;
    state.has_index_keys = groups > 0;
  }
  rotate(latent.data(), groups, 1, hd, group_positions.data(), true, false);
  cpu::fake_quant_fp4(latent.data(), groups, hd, 16, /*e4m3_scales=*/true);
  state.compressed_kv = std::move(latent);
  state.num_compressed = groups;
  state.has_compressed = groups > 0;
}

void DeepseekV41Model::run_indexer(int64_t layer_idx, const SequenceChunk& seq, int64_t first,
                                   const int32_t* positions, const float* x, const float* q_residual,
                                   SequenceState& state) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = layers_[layer_idx];
  if (!state.has_index_keys) return;  // nothing to score yet: the previous selection stands
  const int64_t n = seq.num_new, heads = v.index_n_heads, id = v.index_head_dim, G = state.num_index_keys;
  const int64_t H = config_.hidden_size;
  std::vector<float> q(n * heads * id), w(n * heads);
  cpu::linear(q_residual + first * v.q_lora_rank, layer.indexer_wq_b, nullptr, q.data(), n, heads * id, v.q_lora_rank);
  rotate(q.data(), n, heads, id, positions + first, true, false);
  cpu::fake_quant_fp4(q.data(), n * heads, id, 32, /*e4m3_scales=*/false);
  cpu::linear(x + first * H, layer.indexer_weights, nullptr, w.data(), n, heads, H);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(id));
  const float heads_scale = 1.0f / std::sqrt(static_cast<float>(heads));

  std::vector<std::vector<char>> selected(n, std::vector<char>(G, 0));
  const bool candidate_mask = layer.uses_candidates && !layer.candidate_source && !state.candidates.empty();
  if (layer.candidate_source) state.candidates.assign(n, {});
  std::vector<int32_t> visible(n);
  for (int64_t i = 0; i < n; ++i) visible[i] = static_cast<int32_t>((positions[first + i] + 1) / layer.ratio);
  std::vector<float> all_scores(n * G);
  cpu::indexer_scores(q.data(), w.data(), state.index_keys.data(), nullptr, visible.data(), n, heads, id, G, softmax_scale,
                      heads_scale, all_scores.data());
  std::vector<float> scores(G);
  std::vector<int32_t> picked(v.index_topk);
  int32_t num_picked = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(all_scores.data() + i * G, G, scores.data());
    if (layer.candidate_source) {
      std::vector<uint8_t> mask(G);
      cpu::candidate_blocks(scores.data(), &visible[i], 1, G, v.candidate_topk_blocks, v.candidate_block_size,
                            mask.data());
      state.candidates[i].assign(mask.begin(), mask.end());
    } else if (candidate_mask) {
      DI_CHECK(static_cast<int64_t>(state.candidates[i].size()) == G,
               "layer {}: candidate mask over {} entries, indexer keys {}", layer_idx, state.candidates[i].size(), G);
      cpu::mask_scores(scores.data(), reinterpret_cast<const uint8_t*>(state.candidates[i].data()), G);
    }
    cpu::select_topk(scores.data(), 1, G, v.index_topk, picked.data(), &num_picked);
    for (int32_t j = 0; j < num_picked; ++j) selected[i][picked[j]] = 1;
  }
  state.selected = std::move(selected);
}

void DeepseekV41Model::attention(int64_t layer_idx, const ForwardBatch& batch, const std::vector<int32_t>& positions,
                                 const float* x, float* out, MlaKvCache& cache,
                                 std::vector<SequenceState>& states) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = layers_[layer_idx];
  const int64_t T = batch.num_tokens(), H = config_.hidden_size, heads = v.num_attention_heads, hd = v.head_dim;
  const int64_t window = v.sliding_window;
  const bool compress = layer.ratio > 0;  // these layers rotate with the compress RoPE

  std::vector<float> q_residual(T * v.q_lora_rank), q(T * heads * hd), kv(T * hd);
  project_query(layer, x, T, positions.data(), compress, q_residual.data(), q.data());
  project_window_kv(layer, x, T, positions.data(), compress, kv.data());

  // This step's tokens into the cache: the window K=V, and the compressor inputs on a KV source.
  std::vector<float> compressor_kv, compressor_gate;
  if (layer.kv_source) {
    compressor_kv.resize(T * hd);
    cpu::linear(x, layer.compressor_wkv, nullptr, compressor_kv.data(), T, hd, H);
    if (layer.ratio > 1) {
      compressor_gate.resize(T * hd);
      cpu::linear(x, layer.compressor_wgate, nullptr, compressor_gate.data(), T, hd, H);
    } else {
      cpu::rms_norm(compressor_kv.data(), layer.compressor_norm, compressor_kv.data(), T, hd, config_.rms_norm_eps);
    }
  }
  int64_t first = 0;
  for (const SequenceChunk& seq : batch.sequences) {
    for (int64_t i = 0; i < seq.num_new; ++i) {
      float* entry = cache.entry(layer_idx, seq.block_table, seq.num_cached + i);
      const int64_t t = first + i;
      std::copy_n(kv.data() + t * hd, hd, entry);
      if (seq.num_cached + i < seq.keep_inputs_below) continue;  // SWA replay: the loaded inputs are exact
      if (!compressor_kv.empty()) std::copy_n(compressor_kv.data() + t * hd, hd, entry + hd);
      if (!compressor_gate.empty()) std::copy_n(compressor_gate.data() + t * hd, hd, entry + 2 * hd);
    }
    first += seq.num_new;
  }

  // Per sequence: the compressed entries this layer's group publishes and the indexer's picks; then every query
  // attends its window plus its picks (cpu::sparse_window_attention), the per-sequence entries side by side.
  std::vector<int32_t> tables, row_positions(T), extra_offsets(T + 1, 0), extra_ids, window_floors(T, 0);
  // Bounded replay (mask mode): a decoder layer's window reaches no lower than its sequence's replay floor; after a
  // hit without window state (SWA replay) no layer's window reaches below the sequence's swa_floor.
  const bool decoder = layer_idx >= v41_first_decoder_layer(v);
  bool floored = false;
  std::vector<float> extra;
  int64_t max_blocks = 1;
  for (const SequenceChunk& seq : batch.sequences)
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seq.block_table.size()));
  tables.assign(T * max_blocks, 0);
  first = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    SequenceState& state = states[s];
    if (compress) {
      if (layer.kv_source) publish_compressed(layer_idx, seq, cache, state);
      if (layer.index_source) run_indexer(layer_idx, seq, first, positions.data(), x, q_residual.data(), state);
    }
    // The compressed entries this layer reads, and which of them each query was given.
    const int64_t G = compress && state.has_compressed ? state.num_compressed : 0;
    const bool have_selection = G > 0 && !state.selected.empty();
    if (have_selection)
      DI_CHECK(static_cast<int64_t>(state.selected[0].size()) == G,
               "layer {}: the indexer selected over {} compressed entries, the group has {}", layer_idx,
               state.selected[0].size(), G);
    const auto base = static_cast<int32_t>(extra.size() / hd);
    if (have_selection) extra.insert(extra.end(), state.compressed_kv.begin(), state.compressed_kv.begin() + G * hd);
    for (int64_t i = 0; i < seq.num_new; ++i) {
      const int64_t t = first + i;
      std::copy(seq.block_table.begin(), seq.block_table.end(), tables.begin() + t * max_blocks);
      row_positions[t] = static_cast<int32_t>(seq.num_cached + i);
      const int64_t floor = std::max(decoder ? seq.replay_floor : 0, seq.swa_floor);
      if (floor > 0) {
        window_floors[t] = static_cast<int32_t>(floor);
        floored = true;
      }
      if (have_selection)
        for (int64_t g = 0; g < G; ++g)
          if (state.selected[i][g]) extra_ids.push_back(base + static_cast<int32_t>(g));
      extra_offsets[t + 1] = static_cast<int32_t>(extra_ids.size());
    }
    first += seq.num_new;
  }
  std::vector<float> attn(T * heads * hd);
  const cpu::SparseWindowKeys keys{cache.layer_entries(layer_idx), cache.entry_dim(), tables.data(), max_blocks,
                                   row_positions.data(), window, extra.data(), extra_offsets.data(),
                                   extra_ids.data(), floored ? window_floors.data() : nullptr};
  cpu::sparse_window_attention(q.data(), keys, layer.attn_sink, T, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                               attn.data());
  project_output(layer, attn.data(), T, positions.data(), compress, out);
}

void DeepseekV41Model::project_query(const Layer& layer, const float* x, int64_t T, const int32_t* positions,
                                     bool compress, float* q_residual, float* q) const {
  const V41TextConfig& v = config_.v41;
  const int64_t heads = v.num_attention_heads, hd = v.head_dim;
  cpu::linear(x, layer.wq_a, nullptr, q_residual, T, v.q_lora_rank, config_.hidden_size);
  cpu::rms_norm(q_residual, layer.q_norm, q_residual, T, v.q_lora_rank, config_.rms_norm_eps);
  cpu::linear(q_residual, layer.wq_b, nullptr, q, T, heads * hd, v.q_lora_rank);
  rotate(q, T, heads, hd, positions, compress, false);
}

void DeepseekV41Model::project_window_kv(const Layer& layer, const float* x, int64_t T, const int32_t* positions,
                                         bool compress, float* kv) const {
  const int64_t hd = config_.v41.head_dim;
  cpu::linear(x, layer.wkv, nullptr, kv, T, hd, config_.hidden_size);
  cpu::rms_norm(kv, layer.kv_norm, kv, T, hd, config_.rms_norm_eps);
  rotate(kv, T, 1, hd, positions, compress, false);
  cpu::fake_quant_fp8(kv, T, hd, 32);
}

void DeepseekV41Model::project_output(const Layer& layer, float* attn, int64_t T, const int32_t* positions,
                                      bool compress, float* out) const {
  const V41TextConfig& v = config_.v41;
  const int64_t H = config_.hidden_size, heads = v.num_attention_heads, hd = v.head_dim;
  // K = V carried RoPE: rotate the outputs back, then the grouped low-rank projection.
  rotate(attn, T, heads, hd, positions, compress, true);
  const int64_t groups = v.o_groups, per_group = heads * hd / groups, rank = v.o_lora_rank;
  std::vector<float> group_in(T * per_group), group_out(T * rank), low_rank(T * groups * rank);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(attn + t * heads * hd + g * per_group, per_group, group_in.data() + t * per_group);
    cpu::linear(group_in.data(), layer.wo_a + g * rank * per_group, nullptr, group_out.data(), T, rank, per_group);
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(group_out.data() + t * rank, rank, low_rank.data() + (t * groups + g) * rank);
  }
  cpu::linear(low_rank.data(), layer.wo_b, nullptr, out, T, H, groups * rank);
}

}  // namespace deepinfer
