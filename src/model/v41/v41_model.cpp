#include "src/model/v41/v41_model.h"

#include "src/model/v41/v41_cpu_blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/engram.h"
#include "kernels/cpu/hyper_connections.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/router.h"
#include "src/model/engram_hash.h"
#include "src/model/router_params.h"

namespace deepinfer {

DeepseekV41Model::DeepseekV41Model(ModelConfig config, WeightStore weights)
    : HostCausalLm(std::move(config), std::move(weights)),
      main_rope_(v41_rope_config(config_.v41, false)), compress_rope_(v41_rope_config(config_.v41, true)) {
  const V41TextConfig& v = config_.v41;
  // Under expert parallelism a rank loaded only the experts it owns.
  experts_.take_from(weights_, [](int64_t layer, int64_t e) {
    return routed_expert_tensors(fmt::format("layers.{}.ffn.experts.{}.", layer, e));
  });
  require_engram_hash(v);
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    Layer layer = resolve_layer(fmt::format("layers.{}.", l), v41_layer_role(v, l));
    for (int64_t s : v.kv_source_layer_ids)
      if (s <= l) layer.source = std::max(layer.source, s);
    layers_.push_back(std::move(layer));
  }
  embed_ = weights_.data("embed.weight");
  final_norm_ = weights_.data("norm.weight");
  head_ = weights_.data("head.weight");
  entry_dim_ = v41_cache_entry_dim(v);
  set_cache_entry(entry_dim_, 0);
  load_dspark();
}

DeepseekV41Model::Layer DeepseekV41Model::resolve_layer(const std::string& p, V41LayerRole role) const {
  Layer layer;
  static_cast<V41LayerRole&>(layer) = role;
  for (auto [mix, name] : {std::pair{&layer.hc_attn, "hc_attn"}, std::pair{&layer.hc_ffn, "hc_ffn"}}) {
    mix->fn = weights_.data(p + name + "_fn");
    mix->base = weights_.data(p + name + "_base");
    mix->scale = weights_.data(p + name + "_scale");
  }
  layer.attn_norm = weights_.data(p + "attn_norm.weight");
  layer.ffn_norm = weights_.data(p + "ffn_norm.weight");
  const std::string a = p + "attn.";
  layer.wq_a = weights_.data(a + "wq_a.weight");
  layer.q_norm = weights_.data(a + "q_norm.weight");
  layer.wq_b = weights_.data(a + "wq_b.weight");
  layer.wkv = weights_.data(a + "wkv.weight");
  layer.kv_norm = weights_.data(a + "kv_norm.weight");
  layer.wo_a = weights_.data(a + "wo_a.weight");
  layer.wo_b = weights_.data(a + "wo_b.weight");
  layer.attn_sink = weights_.data(a + "attn_sink");
  if (layer.kv_source) {
    layer.compressor_wkv = weights_.data(a + "compressor.wkv.weight");
    if (layer.ratio > 1) layer.compressor_wgate = weights_.data(a + "compressor.wgate.weight");
    layer.compressor_norm = weights_.data(a + "compressor.norm.weight");
  }
  if (layer.index_source) {
    layer.indexer_wq_b = weights_.data(a + "indexer.wq_b.weight");
    layer.indexer_weights = weights_.data(a + "indexer.weights_proj.weight");
    if (layer.owns_index_keys) {
      layer.indexer_wk = weights_.data(a + "indexer.wk.weight");
      layer.indexer_k_norm = weights_.data(a + "indexer.k_norm.weight");
    }
  }
  layer.router = weights_.data(p + "ffn.gate.weight");
  layer.router_bias = weights_.data(p + "ffn.gate.bias");
  layer.shared = resolve_expert(p + "ffn.shared_experts");
  if (layer.engram_index >= 0) {
    layer.engram_table = weights_.data(p + "engram.embed.weight");
    layer.engram_wkv = weights_.data(p + "engram.wkv.weight");
    layer.engram_q = weights_.data(p + "engram.q_weight");
    layer.engram_k = weights_.data(p + "engram.k_weight");
  }
  return layer;
}

DeepseekV41Model::Expert DeepseekV41Model::resolve_expert(const std::string& prefix) const {
  return {weights_.data(prefix + ".w1.weight"), weights_.data(prefix + ".w2.weight"),
          weights_.data(prefix + ".w3.weight")};
}

void DeepseekV41Model::expert_forward(const Expert& w, const float* x, int64_t n, float* out) const {
  swiglu_expert_forward(w.w1, w.w3, w.w2, x, n, config_.hidden_size, config_.moe_intermediate_size,
                        static_cast<float>(config_.swiglu_limit), out);
}

void DeepseekV41Model::rotate(float* x, int64_t num_positions, int64_t rows_per_position, int64_t stride,
                              const int32_t* positions, bool compress, bool inverse) const {
  const RotaryTable& table = compress ? compress_rope_ : main_rope_;
  const int64_t half = table.half_dim(), rope_dim = 2 * half;
  if (num_positions == 0 || rope_dim == 0) return;
  std::vector<float> cos(num_positions * half), sin(num_positions * half);
  table.fill(positions, num_positions, cos.data(), sin.data());
  if (inverse)
    for (float& s : sin) s = -s;
  cpu::rope(x + (stride - rope_dim), num_positions * rows_per_position, stride, rope_dim, cos.data(), sin.data(),
            rows_per_position, cpu::RopeLayout::kInterleaved);
}

void DeepseekV41Model::hyper_mixes(const HyperMix& w, const float* streams, int64_t T, float* pre, float* post,
                                   float* comb) const {
  const V41TextConfig& v = config_.v41;
  const int64_t hc = v.hc_mult, D = hc * config_.hidden_size, M = (2 + hc) * hc;
  std::vector<float> flat(T * D), mixes(T * M);
  cpu::hc_flat_rms_norm(streams, T, D, config_.rms_norm_eps, flat.data());
  cpu::linear(flat.data(), w.fn, nullptr, mixes.data(), T, M, D);
  cpu::hc_mixes(mixes.data(), w.base, w.scale, T, hc, static_cast<float>(v.hc_eps), v.hc_sinkhorn_iters, pre, post,
                comb);
}

void DeepseekV41Model::moe(int64_t layer_idx, const float* x, float* out, int64_t T,
                           ExpertDispatcher* dispatcher) const {
  const Layer& layer = layers_[layer_idx];
  moe_block(layer, experts_, layer_idx, router_params(config_, layer.router_bias), x, out, T, dispatcher);
}

void DeepseekV41Model::moe_block(const Layer& layer, const ExpertStore& store, int64_t store_layer,
                                 const cpu::RouterParams& router, const float* x, float* out, int64_t T,
                                 ExpertDispatcher* dispatcher) const {
  const int64_t H = config_.hidden_size, E = router.num_experts, K = router.top_k;
  std::vector<float> logits(T * E), weights(T * K), scratch(2 * E + 1);
  std::vector<int32_t> ids(T * K);
  cpu::linear(x, layer.router, nullptr, logits.data(), T, E, H);
  // Selection by the biased scores; the weights are the unbiased ones.
  cpu::route_topk(logits.data(), T, router, ids.data(), weights.data(), scratch.data());
  expert_forward(layer.shared, x, T, out);
  add_routed_experts(store, dispatcher, store_layer, x, ids.data(), weights.data(), T, K, out, config_.batch_invariant);
}

void DeepseekV41Model::gather_engram_rows(const Layer& layer, const int64_t* rows, int64_t n,
                                          ExpertDispatcher* dispatcher, float* gathered) const {
  const V41TextConfig& v = config_.v41;
  const RowShard& shard = v.engram_shard;
  const int64_t ed = v.engram_head_dim;
  if (shard.whole()) return cpu::engram_gather(layer.engram_table, rows, n, 1, ed, gathered);
  DI_CHECK(dispatcher != nullptr, "engram tables split across {} ranks, but no EP group to fetch rows from",
           shard.parts);
  const int64_t table_rows = v.engram_num_embeddings[layer.engram_index], first = shard.first(table_rows),
                count = shard.count(table_rows);
  std::vector<int32_t> owners(n);
  for (int64_t i = 0; i < n; ++i) owners[i] = static_cast<int32_t>(shard.owner(rows[i], table_rows));
  const auto row_bytes = static_cast<int64_t>(ed * sizeof(float));
  dispatcher->fetch_split_rows(
      {rows, static_cast<size_t>(n)}, owners, row_bytes,
      [&](std::span<const int64_t> asked, std::byte* out) {
        std::vector<int64_t> local(asked.size());
        for (size_t j = 0; j < asked.size(); ++j) {
          DI_CHECK(asked[j] >= first && asked[j] < first + count, "engram row {} asked of the rank holding [{}, {})",
                   asked[j], first, first + count);
          local[j] = asked[j] - first;
        }
        cpu::gather_byte_rows(reinterpret_cast<const uint8_t*>(layer.engram_table), row_bytes, local.data(),
                              static_cast<int64_t>(local.size()), reinterpret_cast<uint8_t*>(out), row_bytes);
      },
      reinterpret_cast<std::byte*>(gathered));
}

Tensor DeepseekV41Model::forward(const ForwardBatch& batch, KvCache& kv_cache, ExpertDispatcher* dispatcher) const {
  MlaKvCache& cache = host_cache(kv_cache);
  const V41TextConfig& v = config_.v41;
  const int64_t T = batch.num_tokens(), H = config_.hidden_size, hc = v.hc_mult;
  check_batch(batch, config_.vocab_size);
  const std::vector<int32_t> positions = batch.positions();

  CpuBlocks blocks{*this, &batch, &positions, cache, dispatcher, T, H, hc};
  return run_v41_layers(v, blocks);
}

}  // namespace deepinfer
