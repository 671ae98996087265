#include "src/model/v41/cuda/cuda_v41_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/engram.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/hyper_connections.cuh"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "src/model/cuda/cuda_kv_cache.h"
#include "src/model/cuda/device_sampling.h"
#include "src/model/engram_hash.h"
#include "src/model/v41/cuda/cuda_v41_blocks.h"
#include "src/model/v41/cuda/cuda_v41_step.h"
#include "src/model/rope.h"

namespace deepinfer {

CudaV41Model::CudaV41Model(ModelConfig config, const DeviceWeightSource& weights, int device)
    : CudaCausalLm(std::move(config), device) {
  const ModelConfig& c = config_;
  const V41TextConfig& v = c.v41;
  require_engram_hash(v);
  for (int64_t rows : v.engram_num_embeddings)
    DI_INPUT_CHECK(rows <= std::numeric_limits<int32_t>::max(),
                   "the CUDA engram gathers address tables of fewer than 2^31 rows; one has {}", rows);
  if (!v.engram_layer_ids.empty() && v.engram_shard.whole()) {
    const EngramHashTables& t = v.engram_hash;
    engram_hash_ = std::make_unique<DeviceEngramHash>(DeviceEngramHash{
        DeviceArray<int32_t>::from_host(t.compressed_ids), DeviceArray<int64_t>::from_host(t.multipliers),
        DeviceArray<int64_t>::from_host(t.primes), DeviceArray<int64_t>::from_host(t.offsets),
        t.compressed_ids[v.engram_pad_id]});
  }
  const int64_t H = c.hidden_size, hd = v.head_dim, hc = v.hc_mult;
  DI_INPUT_CHECK(hc <= cuda::kHcMaxStreams && H <= cuda::kHcMaxHidden,
                 "the CUDA hyper-connections hold hc_mult <= {} and hidden_size <= {}; the model has {} and {}",
                 cuda::kHcMaxStreams, cuda::kHcMaxHidden, hc, H);
  const char* chain = std::getenv("DEEPINFER_HC_SITE_CHAIN");
  hc_site_fused_ = cuda::hc_site_supports(hc, H) && !(chain != nullptr && std::string(chain) == "1");
  DI_INPUT_CHECK(hd <= cuda::kSparseMaxHeadDim, "the CUDA V4.1 attention holds head_dim <= {}; the model has {}",
                 cuda::kSparseMaxHeadDim, hd);
  DI_INPUT_CHECK(v.index_head_dim <= cuda::kIndexerMaxDim &&
                     v.index_n_heads * v.index_head_dim <= cuda::kIndexerMaxQueryFloats,
                 "the CUDA indexer holds index_head_dim <= {} and index_n_heads x index_head_dim <= {}; the model has "
                 "{} x {}", cuda::kIndexerMaxDim, cuda::kIndexerMaxQueryFloats, v.index_n_heads, v.index_head_dim);
  DI_INPUT_CHECK(c.n_routed_experts <= cuda::kRouteMaxExperts && c.num_experts_per_tok <= 32,
                 "the CUDA router handles at most {} experts and top-32; the model has {} experts, top-{}",
                 cuda::kRouteMaxExperts, c.n_routed_experts, c.num_experts_per_tok);
  DI_INPUT_CHECK(H % 8 == 0 && v.q_lora_rank % 8 == 0 && hd % 32 == 0 && v.index_head_dim % 32 == 0,
                 "the CUDA V4.1 blocks read rows in 16-byte pieces and quantise blocks of 32: hidden_size and "
                 "q_lora_rank must be multiples of 8, head_dim and index_head_dim of 32");
  const RotaryTable main_rope(v41_rope_config(v, false)), compress_rope(v41_rope_config(v, true));
  main_inv_freq_ = DeviceArray<float>::from_host(main_rope.inv_freq());
  compress_inv_freq_ = DeviceArray<float>::from_host(compress_rope.inv_freq());

  // The routed experts as the checkpoint stores them: FP4 where its quantization_config says so.
  const bool fp4_experts = c.quantization.fp4_experts;
  DI_INPUT_CHECK(!fp4_experts || cuda::moe_gemv_fp4_supports(H, c.moe_intermediate_size, c.num_experts_per_tok),
                 "the CUDA FP4 experts hold hidden and moe_intermediate_size multiples of 32 within 48 KB rows; the "
                 "model has {} and {}", H, c.moe_intermediate_size);
  experts_ = std::make_unique<CudaExpertStore>(
      ExpertStore::Dims{c.num_hidden_layers, c.n_routed_experts, H, c.moe_intermediate_size}, arena_, num_sms_,
      static_cast<float>(c.swiglu_limit),
      fp4_experts ? CudaExpertStore::Format::kFp4 : CudaExpertStore::Format::kBf16, c.expert_slots_per_rank);
  const size_t before_layers = arena_.bytes_in_use();
  moe_ = std::make_unique<CudaMoe>(config_, *experts_, num_sms_, profiler_);
  // The attention projections and shared experts in FP8 where the checkpoint has them so (stored_fp8).
  const bool fp8 = c.quantization.fp8;
  DI_INPUT_CHECK(!fp8 || (v.q_lora_rank % 32 == 0 && hd % 32 == 0 && H % 32 == 0 &&
                          (v.num_attention_heads * hd / v.o_groups) % 32 == 0),
                 "the CUDA FP8 projections keep whole 32 x 32 scale blocks: q_lora_rank, head_dim, hidden_size and a "
                 "group's heads x head_dim must be multiples of 32");
  int64_t keys_ratio = -1;       // of the latest layer that owns indexer keys
  int64_t entries_ratio = -1;    // of the latest KV source
  int64_t selection_ratio = -1;  // of the keys the latest index source scored
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    const V41LayerRole role = v41_layer_role(v, l);
    // The indexer's rows see (position + 1) / ratio entries of the keys they score: those keys must be of the same
    // ratio (so within the row's own sequence's), and a layer's picks index the compressed entries it attends, so
    // those are of that ratio too, as in the released schedule. (Then no step's launches depend on which
    // sequences have entries yet, and decode steps can be captured as CUDA graphs.)
    if (role.owns_index_keys) keys_ratio = role.ratio;
    if (role.kv_source) entries_ratio = role.ratio;
    if (role.index_source) selection_ratio = keys_ratio;
    DI_INPUT_CHECK(!role.index_source || role.owns_index_keys || keys_ratio < 0 || keys_ratio == role.ratio,
                   "layer {}: an index source of compress ratio {} reading indexer keys of ratio {} is not supported "
                   "on the GPU", l, role.ratio, keys_ratio);
    DI_INPUT_CHECK(role.ratio == 0 || entries_ratio < 0 || selection_ratio < 0 || entries_ratio == selection_ratio,
                   "layer {}: attending compressed entries of ratio {} with picks over entries of ratio {} is not "
                   "supported on the GPU", l, entries_ratio, selection_ratio);
    Layer layer = upload_layer(weights, p, role, *experts_, l, c.n_routed_experts);
    if (layer.engram_index >= 0) {
      // FP8 checkpoints' tables stay FP8 (codes and a scale byte per 32 values of a row, quantised on the device
      // from the loaded values, which they reproduce exactly), in GPU memory or pinned host memory; the bf16
      // staging copy lives in the same kind of memory and is freed after.
      // Under an EP group of several ranks, this rank's part of the rows (v.engram_shard; the rest is fetched).
      const std::string name = p + "engram.embed.weight";
      const Shape& shape = shapes_.at(name);
      const int64_t first = v.engram_shard.first(shape[0]), rows = v.engram_shard.count(shape[0]),
                    cols = shape_numel(shape) / shape[0];
      const bool table_fp8 = fp8 && cols % 32 == 0;
      const size_t bf16_bytes = rows * cols * sizeof(Bf16);
      const size_t bytes = table_fp8 ? static_cast<size_t>(rows * cols + rows * cols / 32) : bf16_bytes;
      engram_table_bytes_ += bytes;
      void* table = nullptr;
      if (v.engram_tables_on_host) {  // written through its mapped address, read so by the gather
        engram_host_tables_.emplace_back(bytes);
        table = engram_host_tables_.back().data();
      } else {
        table = arena_.take(bytes);
      }
      if (!table_fp8) {
        weights.fill_bf16_rows(name, shape, first, rows, static_cast<Bf16*>(table));
        layer.engram_table = static_cast<const Bf16*>(table);
      } else {
        MappedHostArray host_staging(v.engram_tables_on_host ? bf16_bytes : 0);
        DeviceArray<Bf16> device_staging(v.engram_tables_on_host ? 0 : rows * cols);
        auto* staging = v.engram_tables_on_host ? static_cast<Bf16*>(host_staging.data()) : device_staging.data();
        weights.fill_bf16_rows(name, shape, first, rows, staging);
        std::vector<int64_t> all(rows);
        std::iota(all.begin(), all.end(), 0);
        const auto ids = DeviceArray<int64_t>::from_host(all);
        auto* codes = static_cast<uint8_t*>(table);
        cuda::write_fp8_kv_rows(staging, cols, ids.data(), rows, cols, codes, codes + rows * cols, nullptr,
                                cuda::Fp8Scales::kExactFit);
        DI_CUDA_CHECK(cudaGetLastError());
        DI_CUDA_CHECK(cudaDeviceSynchronize());  // before the staging copies go
        layer.engram_codes = codes;
        layer.engram_scales = codes + rows * cols;
      }
      layer.engram_wkv = upload(weights, p + "engram.wkv.weight");
      layer.engram_q = upload_f32(weights, p + "engram.q_weight");
      layer.engram_k = upload_f32(weights, p + "engram.k_weight");
    }
    layers_.push_back(std::move(layer));
  }
  const size_t after_layers = arena_.bytes_in_use();
  embed_ = upload(weights, "embed.weight");
  final_norm_ = upload(weights, "norm.weight");
  head_ = upload(weights, "head.weight");
  // The CPU model's entry, so that caches move between the backends (KV handoff) unchanged.
  entry_dim_ = v41_cache_entry_dim(v);
  for (const Layer& layer : layers_)
    cache_specs_.push_back(layer.kv_source ? CudaV41KvCache::LayerSpec{layer.compressor.n, layer.ratio,
                                                                       layer.owns_index_keys ? v.index_head_dim : 0}
                                           : CudaV41KvCache::LayerSpec{});
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const double GiB = 1 << 30, layers = static_cast<double>(std::max<int64_t>(c.num_hidden_layers, 1));
  spdlog::info("CUDA V4.1 model: {:.2f} GiB on GPU {} ({:.2f} GiB allocated for it); a layer: {:.3f} GiB of routed "
               "experts ({}, {} places of {} experts), {:.3f} GiB of attention ({}), hyper-connection, router and "
               "shared-expert weights; embedding, norm and head {:.3f} GiB",
               arena_.bytes_in_use() / GiB, device_.id(), arena_.bytes_reserved() / GiB,
               static_cast<double>(experts_->bytes_per_expert()) * static_cast<double>(experts_->capacity()) / GiB,
               fp4_experts ? "FP4 e2m1 + ue8m0 scales" : "bf16", experts_->capacity(), c.n_routed_experts,
               static_cast<double>(after_layers - before_layers) / layers / GiB, fp8 ? "FP8 projections" : "bf16",
               static_cast<double>(arena_.bytes_in_use() - after_layers) / GiB);
  const int64_t sources = std::count_if(cache_specs_.begin(), cache_specs_.end(),
                                        [](const CudaV41KvCache::LayerSpec& spec) { return spec.input_width > 0; });
  spdlog::info("CUDA V4.1 cache: {} bytes a token over {} layers (FP8 window K=V: {} bytes a layer; bf16 compressor "
               "inputs and FP4 compressed entries and indexer keys on the {} KV sources)",
               CudaV41KvCache::bytes_per_token(hd, cache_specs_),
               layers_.size(), hd + hd / 32, sources);
  if (!v.engram_layer_ids.empty())
    spdlog::info("CUDA V4.1 engram: {} layers, tables {:.3f} GiB ({}) in {}{}", v.engram_layer_ids.size(),
                 static_cast<double>(engram_table_bytes_) / GiB,
                 layers_[v.engram_layer_ids[0]].engram_codes != nullptr ? "FP8 e4m3 + ue8m0 per 32" : "bf16",
                 v.engram_tables_on_host ? "pinned host memory (rows gathered over PCIe)" : "GPU memory",
                 v.engram_shard.whole() ? std::string()
                                        : fmt::format(": part {} of {} of every table's rows, the rest fetched from "
                                                      "the EP group", v.engram_shard.part, v.engram_shard.parts));
  const size_t before_dspark = arena_.bytes_in_use();
  load_dspark(weights);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  if (dspark_ != nullptr)
    spdlog::info("CUDA V4.1 DSpark drafter: {} layers, {:.3f} GiB on GPU {}", dspark_->layers.size(),
                 static_cast<double>(arena_.bytes_in_use() - before_dspark) / GiB, device_.id());
}

CudaV41Model::Layer CudaV41Model::upload_layer(const DeviceWeightSource& weights, const std::string& p,
                                               const V41LayerRole& role, CudaExpertStore& experts,
                                               int64_t expert_layer, int64_t num_experts) {
  const ModelConfig& c = config_;
  const V41TextConfig& v = c.v41;
  const std::string a = p + "attn.";
  // wo_a runs group by group: FP8 where a group's rows are whole scale blocks (o_lora_rank 1024 in the release;
  // the tiny fixture's 16 keeps it bf16, which holds its FP8 values exactly).
  const bool fp8_wo_a_shape = v.o_lora_rank % 32 == 0;
  Layer layer;
  static_cast<V41LayerRole&>(layer) = role;
  for (auto [mix, name] : {std::pair{&layer.hc_attn, "hc_attn"}, std::pair{&layer.hc_ffn, "hc_ffn"}}) {
    mix->fn = upload(weights, p + name + "_fn");
    mix->base = upload_f32(weights, p + name + "_base");
    mix->scale = upload_f32(weights, p + name + "_scale");
  }
  layer.attn_norm = upload(weights, p + "attn_norm.weight");
  layer.ffn_norm = upload(weights, p + "ffn_norm.weight");
  // The query's first projection and K=V both read h: stacked, one product.
  const std::vector<std::string> q_kv = {a + "wq_a.weight", a + "wkv.weight"};
  layer.q_kv = upload_projection(weights, q_kv, stored_fp8(weights, q_kv));
  if (layer.kv_source) {
    std::vector<std::string> parts = {a + "compressor.wkv.weight"};
    if (layer.ratio > 1) parts.push_back(a + "compressor.wgate.weight");
    layer.compressor = upload_projection(weights, parts, false);
  }
  layer.q_norm = upload(weights, a + "q_norm.weight");
  layer.wq_b = upload_projection(weights, {a + "wq_b.weight"}, stored_fp8(weights, {a + "wq_b.weight"}));
  layer.kv_norm = upload(weights, a + "kv_norm.weight");
  layer.wo_a = upload_projection(weights, {a + "wo_a.weight"},
                                 fp8_wo_a_shape && stored_fp8(weights, {a + "wo_a.weight"}));
  layer.wo_b = upload_projection(weights, {a + "wo_b.weight"}, stored_fp8(weights, {a + "wo_b.weight"}));
  layer.attn_sink = upload_f32(weights, a + "attn_sink");
  if (layer.kv_source) layer.compressor_norm = upload(weights, a + "compressor.norm.weight");
  if (layer.index_source) {
    layer.indexer_wq_b = upload(weights, a + "indexer.wq_b.weight");
    layer.indexer_weights = upload(weights, a + "indexer.weights_proj.weight");
    if (layer.owns_index_keys) {
      layer.indexer_wk = upload(weights, a + "indexer.wk.weight");
      layer.indexer_k_norm = upload(weights, a + "indexer.k_norm.weight");
    }
  }
  CudaMoeWeights& m = layer.moe;
  m.router = upload(weights, p + "ffn.gate.weight");
  m.router_bias = upload_f32(weights, p + "ffn.gate.bias");
  m.has_shared = c.n_shared_experts > 0;
  if (m.has_shared) {
    const std::string s = p + "ffn.shared_experts.";
    const int64_t I = shapes_.at(s + "w1.weight")[0];
    const std::vector<std::string> gate_up = {s + "w1.weight", s + "w3.weight"};  // w1 the gate, w3 the up
    const bool shared_fp8 = I % 32 == 0 && stored_fp8(weights, {s + "w1.weight", s + "w2.weight", s + "w3.weight"});
    m.shared = {upload_projection(weights, gate_up, shared_fp8),
                upload_projection(weights, {s + "w2.weight"}, shared_fp8), I};
  }
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::string prefix = fmt::format("{}ffn.experts.{}.", p, e);
    if (!weights.has(prefix + "w1.weight")) continue;  // another EP rank's
    experts.load(expert_layer, e, weights, prefix + "w1.weight", prefix + "w3.weight", prefix + "w2.weight");
  }
  return layer;
}

CudaV41Model::Projection CudaV41Model::upload_projection(const DeviceWeightSource& weights,
                                                         const std::vector<std::string>& names, bool fp8) {
  Projection p;
  p.k = shapes_.at(names[0])[1];
  for (const std::string& name : names) p.n += shapes_.at(name)[0];
  auto* bf16 = static_cast<Bf16*>(fp8 ? nullptr : arena_.take(p.n * p.k * sizeof(Bf16)));
  DeviceArray<Bf16> staging(fp8 ? p.n * p.k : 0);
  Bf16* rows = fp8 ? staging.data() : bf16;
  int64_t row = 0;
  for (const std::string& name : names) {
    fill_rows(weights, name, rows, row);
    row += shapes_.at(name)[0];
  }
  if (!fp8) {
    p.bf16 = bf16;
    return p;
  }
  auto* codes = static_cast<uint8_t*>(arena_.take(p.n * p.k));
  auto* scales = static_cast<uint8_t*>(arena_.take(p.n / 32 * (p.k / 32)));
  cuda::quantize_fp8_blocks(rows, p.n, p.k, codes, scales, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());  // before the staging buffer goes
  p.fp8 = codes;
  p.scales = cuda::Fp8BlockScales::ue8m0(scales);
  return p;
}

bool CudaV41Model::stored_fp8(const DeviceWeightSource& weights, const std::vector<std::string>& names) const {
  if (!config_.quantization.fp8) return false;
  return std::ranges::all_of(names, [&](const std::string& name) { return weights.stored_fp8(name).value_or(true); });
}

void CudaV41Model::linear(const Bf16* x, const Projection& w, void* y, bool y_fp32, int64_t m) const {
  device_linear(main_lane(), x, w, y, y_fp32, m, scratch_, num_sms_);
}

void CudaV41Model::fill_rows(const DeviceWeightSource& weights, const std::string& name, Bf16* stacked,
                             int64_t row) const {
  const Shape& shape = shapes_.at(name);
  weights.fill_bf16(name, shape, stacked + row * shape[1]);
}

std::unique_ptr<KvCache> CudaV41Model::make_kv_cache(int64_t num_blocks) const {
  DI_CUDA_CHECK(cudaSetDevice(device_.id()));
  return std::make_unique<CudaV41KvCache>(num_blocks, config_.v41.head_dim, cache_specs_);
}

void CudaV41Model::rotate(Bf16* x, int64_t rows, int64_t stride, const int32_t* positions, int64_t per_position,
                          bool compress) const {
  const int64_t rope_dim = config_.v41.qk_rope_head_dim;
  if (rows == 0 || rope_dim == 0) return;
  const DeviceArray<float>& inv_freq = compress ? compress_inv_freq_ : main_inv_freq_;
  // The V4.1 tables carry no attention factor (1: plain RoPE, and YaRN without its mscale).
  cuda::rope(x, rows, stride, rope_dim, positions, per_position, inv_freq.data(), 1.0f, /*interleaved=*/true,
             nullptr);
}

void CudaV41Model::hyper_site(const HyperMix& mix, const Bf16* norm, int64_t T, float* streams, float*& pre,
                              float*& next_pre, float* post, float* comb, Bf16* h, const Bf16* out) const {
  const V41TextConfig& v = config_.v41;
  const int64_t hc = v.hc_mult, H = config_.hidden_size, D = hc * H, M = (2 + hc) * hc;
  const float eps = config_.rms_norm_eps;
  if (fuses_hc_sites(T)) {
    cuda::hc_site(streams, out, pre, {mix.fn, mix.base, mix.scale, norm}, T, hc, H, eps, static_cast<float>(v.hc_eps),
                  v.hc_sinkhorn_iters, next_pre, post, comb, h, nullptr);
    std::swap(pre, next_pre);
    return;
  }
  if (out != nullptr) cuda::hc_post(streams, out, post, comb, T, hc, H, nullptr);
  auto* flat = scratch_.alloc<Bf16>(T * D);
  auto* mixes = scratch_.alloc<float>(T * M);
  cuda::hc_flat_rms_norm(streams, T, D, eps, flat, nullptr);
  linear(flat, mix.fn, mixes, true, T, M, D);
  cuda::hc_mixes(mixes, mix.base, mix.scale, T, hc, static_cast<float>(v.hc_eps), v.hc_sinkhorn_iters, next_pre, post,
                 comb, nullptr);
  cuda::hc_collapse_rms_norm(streams, pre, norm, T, hc, H, eps, h, nullptr);
  std::swap(pre, next_pre);
}

float* CudaV41Model::run_to_logits(const ForwardBatch& batch, KvCache& kv_cache, ExpertDispatcher* experts,
                                   int64_t* num_rows) const {
  auto* cache = dynamic_cast<CudaV41KvCache*>(&kv_cache);
  DI_CHECK(cache != nullptr && cache->entry_dim() == entry_dim_ && cache->num_layers() == num_cache_layers(),
           "the CUDA V4.1 model needs its own device cache (made after its drafter was enabled, where it was)");
  DI_CUDA_CHECK(cudaSetDevice(device_.id()));
  check_batch(batch, config_.vocab_size);
  for (const SequenceChunk& seq : batch.sequences)
    DI_CHECK(seq.swa_floor == 0 && seq.keep_inputs_below == 0, "SWA replay after a prefix hit is built for the CPU "
             "model only");
  published_.reset();
  scratch_.reset();
  profiler_.mark("start");
  // A decode step (one new token a sequence) lays its compressed entries out at fixed shapes, whether or not it
  // is then graphed, so that a replay and an eager run give the same bits.
  // Sequences whose cached blocks came by import without their compressed groups pool them all again this step
  // (from the cached inputs), which a fixed-shape step cannot.
  std::vector<bool> rebuild(batch.sequences.size());
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    rebuild[s] = seq.num_cached > 0 && cache->groups_missing(seq.block_table, seq.num_cached);
    if (rebuild[s]) cache->set_groups_built(seq.block_table, seq.num_cached);
  }
  const bool decode = !batch.sequences.empty() &&
                      std::all_of(batch.sequences.begin(), batch.sequences.end(),
                                  [](const SequenceChunk& seq) { return seq.num_new == 1; }) &&
                      std::none_of(rebuild.begin(), rebuild.end(), [](bool b) { return b; });
  const StepPlan plan(batch, config_.v41, layers_, decode, rebuild, experts, published_);
  begin_device_work(batch, plan.token_ids, published_);
  if (plan.engram_sources != nullptr) {  // the engram rows, from the inputs as they are now on the device
    const V41TextConfig& v = config_.v41;
    cuda::engram_hash_rows(plan.token_ids, plan.engram_sources, engram_hash_->compressed_ids.data(),
                           engram_hash_->pad_compressed_id, engram_hash_->multipliers.data(),
                           engram_hash_->primes.data(), engram_hash_->offsets.data(), plan.num_tokens,
                           std::ssize(v.engram_layer_ids), v.engram_max_ngram_size, v.engram_n_heads, plan.engram_rows,
                           nullptr);
  }
  StepState state(plan, config_.v41, config_.hidden_size, published_);
  Bf16* features = dspark_enabled_ ? published_.alloc<Bf16>(plan.num_tokens * std::ssize(config_.v41.dspark.target_layer_ids) *
                                                           config_.hidden_size)
                                   : nullptr;
  profiler_.mark("host plan");
  *num_rows = plan.num_rows;
  const auto run = [&]() -> float* {
    CudaBlocks blocks{*this, batch, &plan, &state, *cache, experts, scratch_, plan.num_tokens, config_.hidden_size,
                      config_.v41.hc_mult};
    blocks.features = features;
    return run_v41_layers(config_.v41, blocks);
  };
  // Decode steps whose experts need no host round trip replay a CUDA graph of `run` (decode_graphs.h).
  const bool graphable = decode && may_graph(experts, plan.num_tokens * config_.num_experts_per_tok);
  if (!graphable) return run();
  return graphs_.run({plan.num_tokens, plan.max_blocks, plan.num_rows, cache->layer(0).codes, 0}, run,
                     {&published_, &scratch_});
}

}  // namespace deepinfer
