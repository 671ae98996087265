// The CUDA V4.1 model's step plan and its attention: the projections and cache writes, the KV sources'
// compressed entries, the index sources' picks, and the window + sparse attention. See cuda_v41_model.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/fake_quant.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "kernels/group_slots.h"
#include "src/model/cuda/cuda_kv_cache.h"
#include "src/model/v41/cuda/cuda_v41_step.h"
#include "src/model/engram_hash.h"

namespace deepinfer {

namespace {

// A split table's rows as the serving rank sends them: FP8 codes then their scales, or bf16 values.
int64_t engram_row_bytes(bool fp8, int64_t head_dim) { return fp8 ? head_dim + head_dim / 32 : 2 * head_dim; }

}  // namespace

std::vector<uint8_t> CudaV41Model::fetch_engram_rows(const std::vector<int64_t>& rows, const V41TextConfig& v,
                                                     const std::vector<Layer>& layers, ExpertDispatcher* experts,
                                                     ScratchPool& pool) {
  const RowShard& shard = v.engram_shard;
  DI_CHECK(experts != nullptr, "engram tables split across {} ranks, but no EP group to fetch rows from",
           shard.parts);
  const auto num_layers = static_cast<int64_t>(v.engram_layer_ids.size());
  const int64_t per_layer = static_cast<int64_t>(rows.size()) / std::max<int64_t>(num_layers, 1);
  const int64_t ed = v.engram_head_dim;
  const bool fp8 = layers[v.engram_layer_ids[0]].engram_codes != nullptr;
  const int64_t row_bytes = engram_row_bytes(fp8, ed);
  // A key names the engram layer and the row: e * 2^40 + row (tables hold below 2^31 rows).
  constexpr int64_t kLayerKey = int64_t{1} << 40;
  std::vector<int64_t> keys(rows.size());
  std::vector<int32_t> owners(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t e = static_cast<int64_t>(i) / per_layer, table_rows = v.engram_num_embeddings[e];
    keys[i] = e * kLayerKey + rows[i];
    owners[i] = static_cast<int32_t>(shard.owner(rows[i], table_rows));
  }
  // Serving: each layer's asked rows gathered on the device from this rank's part (GPU or mapped host memory).
  const auto serve = [&](std::span<const int64_t> asked, std::byte* out) {
    for (int64_t e = 0; e < num_layers; ++e) {
      const Layer& layer = layers[v.engram_layer_ids[e]];
      const int64_t table_rows = v.engram_num_embeddings[e], first = shard.first(table_rows),
                    count = shard.count(table_rows);
      std::vector<int64_t> local, where;
      for (size_t j = 0; j < asked.size(); ++j) {
        if (asked[j] / kLayerKey != e) continue;
        const int64_t row = asked[j] % kLayerKey;
        DI_CHECK(row >= first && row < first + count, "engram row {} of layer {} asked of the rank holding [{}, {})",
                 row, v.engram_layer_ids[e], first, first + count);
        local.push_back(row - first);
        where.push_back(static_cast<int64_t>(j));
      }
      if (local.empty()) continue;
      const auto n = static_cast<int64_t>(local.size());
      const int64_t* d_local = device_copy(pool, local);
      auto* staging = pool.alloc<uint8_t>(n * row_bytes);
      if (fp8) {
        cuda::gather_byte_rows(layer.engram_codes, ed, d_local, n, staging, row_bytes, nullptr);
        cuda::gather_byte_rows(layer.engram_scales, ed / 32, d_local, n, staging + ed, row_bytes, nullptr);
      } else {
        cuda::gather_byte_rows(reinterpret_cast<const uint8_t*>(layer.engram_table), 2 * ed, d_local, n, staging,
                               row_bytes, nullptr);
      }
      DI_CUDA_CHECK(cudaGetLastError());
      std::vector<uint8_t> host(n * row_bytes);
      DI_CUDA_CHECK(cudaMemcpy(host.data(), staging, host.size(), cudaMemcpyDeviceToHost));
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(out + where[j] * row_bytes, host.data() + j * row_bytes, row_bytes);
    }
  };
  std::vector<uint8_t> fetched(rows.size() * row_bytes);
  experts->fetch_split_rows(keys, owners, row_bytes, serve, reinterpret_cast<std::byte*>(fetched.data()));
  return fetched;
}

CudaV41Model::StepPlan::StepPlan(const ForwardBatch& batch, const V41TextConfig& v, const std::vector<Layer>& layers,
                                 bool fixed, const std::vector<bool>& rebuild, ExpertDispatcher* experts,
                                 ScratchPool& pool)
    : StepPlan(batch, v, layers, fixed, rebuild, pool, NoEngramRows{}) {
  if (!v.engram_layer_ids.empty()) hash_engram_rows(batch, v, layers, experts, pool);
}

CudaV41Model::StepPlan::StepPlan(const StepPlan& full, const ForwardBatch& kept_batch, const std::vector<int64_t>& kept,
                                 const V41TextConfig& v, const std::vector<Layer>& layers, ScratchPool& pool)
    : StepPlan(kept_batch, v, layers, false, std::vector<bool>(kept_batch.sequences.size()), pool, NoEngramRows{}) {
  DI_CHECK(static_cast<int64_t>(kept.size()) == num_tokens, "a compacted step of {} rows keeps {}", num_tokens,
           kept.size());
  fetched_engram_codes = full.fetched_engram_codes;
  fetched_engram_scales = full.fetched_engram_scales;
  fetched_engram_values = full.fetched_engram_values;
  if (full.engram_rows == nullptr || kept.empty()) return;
  const int64_t cols = v41_engram_columns(v), layers_hashed = static_cast<int64_t>(v.engram_layer_ids.size());
  std::vector<int64_t> rows;  // [engram layers, kept]: rows of cols ids in `full`'s [engram layers, T, cols]
  for (int64_t e = 0; e < layers_hashed; ++e)
    for (const int64_t t : kept) rows.push_back(e * full.num_tokens + t);
  auto* out = pool.alloc<int32_t>(static_cast<int64_t>(rows.size()) * cols);
  const auto row_bytes = static_cast<int64_t>(cols * sizeof(int32_t));
  cuda::gather_byte_rows(reinterpret_cast<const uint8_t*>(full.engram_rows), row_bytes, device_copy(pool, rows),
                         static_cast<int64_t>(rows.size()), reinterpret_cast<uint8_t*>(out), row_bytes, nullptr);
  engram_rows = out;
}

CudaV41Model::StepPlan::StepPlan(const ForwardBatch& batch, const V41TextConfig& v, const std::vector<Layer>& layers,
                                 bool fixed, const std::vector<bool>& rebuild, ScratchPool& pool, NoEngramRows)
    : fixed_shapes(fixed) {
  num_tokens = batch.num_tokens();
  const int64_t T = num_tokens, S = static_cast<int64_t>(batch.sequences.size());
  for (const SequenceChunk& seq : batch.sequences)
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seq.block_table.size()));
  std::vector<int32_t> pos, inverse, rows_table(T * max_blocks, 0), tables(S * max_blocks, 0), offsets(T + 1);
  std::vector<int32_t> floors;
  bool floored = false;
  std::vector<int64_t> slots;
  int64_t first = 0;
  for (int64_t s = 0; s < S; ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    sequences.push_back({first, seq.num_new, seq.num_cached + seq.num_new});
    std::copy(seq.block_table.begin(), seq.block_table.end(), tables.begin() + s * max_blocks);
    floored |= seq.replay_floor > 0;
    for (int64_t i = 0; i < seq.num_new; ++i) {
      floors.push_back(static_cast<int32_t>(seq.replay_floor));
      pos.push_back(static_cast<int32_t>(seq.num_cached + i));
      inverse.push_back(-pos.back());
      std::copy(seq.block_table.begin(), seq.block_table.end(), rows_table.begin() + (first + i) * max_blocks);
    }
    const std::vector<int64_t> new_slots_of = slots_of(seq.block_table, seq.num_cached, seq.num_new);
    slots.insert(slots.end(), new_slots_of.begin(), new_slots_of.end());
    first += seq.num_new;
  }
  for (int64_t t = 0; t <= T; ++t) offsets[t] = static_cast<int32_t>(t * v.index_topk);
  for (const Layer& layer : layers) {
    const int64_t r = layer.ratio;
    if (r == 0 || groups.count(r) > 0) continue;
    Groups& g = groups[r];
    const int64_t capacity = max_blocks * KvCache::kBlockSize / r;  // complete groups a block table can hold
    std::vector<int32_t> visible(T), counts;
    std::vector<int64_t> row_offsets(T);
    for (int64_t t = 0; t < T; ++t) visible[t] = static_cast<int32_t>((pos[t] + 1) / r);
    for (const Sequence& seq : sequences) {
      g.offset.push_back(g.total);
      g.count.push_back(seq.context / r);
      counts.push_back(static_cast<int32_t>(g.count.back()));
      const int64_t rows = fixed_shapes ? capacity : g.count.back();
      for (int64_t i = 0; i < seq.num_new; ++i) row_offsets[seq.first + i] = g.total;
      g.total += rows;
      g.width = std::max(g.width, rows);
    }
    if (fixed_shapes) g.width = capacity;
    // The groups this step completes: from those cached (none where they are to be rebuilt) to the complete ones.
    std::vector<int32_t> cached(S), new_counts(S), new_positions;
    std::vector<int64_t> new_offsets(S), new_slots, new_rows;
    for (int64_t s = 0; s < S; ++s) {
      const SequenceChunk& seq = batch.sequences[s];
      cached[s] = rebuild[s] ? 0 : static_cast<int32_t>(seq.num_cached / r);
      new_counts[s] = static_cast<int32_t>(g.count[s] - cached[s]);
      DI_CHECK(!fixed_shapes || new_counts[s] <= 1, "a fixed-shape step completes at most one group a sequence");
      const int64_t rows = fixed_shapes ? 1 : new_counts[s];
      new_offsets[s] = g.new_total;
      for (int64_t i = 0; i < rows; ++i) {
        const bool real = i < new_counts[s];
        const int64_t group = cached[s] + i;
        new_positions.push_back(real ? static_cast<int32_t>(group * r) : 0);
        new_slots.push_back(real ? group_slot(seq.block_table.data(), r, group) : -1);
        new_rows.push_back(real ? g.offset[s] + group : -1);
      }
      g.new_total += rows;
      g.new_width = std::max(g.new_width, rows);
    }
    g.cached = device_copy(pool, cached);
    g.new_first = g.cached;
    g.new_counts = device_copy(pool, new_counts);
    g.new_offsets = device_copy(pool, new_offsets);
    g.new_positions = device_copy(pool, new_positions);
    g.new_slots = device_copy(pool, new_slots);
    g.new_rows = device_copy(pool, new_rows);
    g.visible = device_copy(pool, visible);
    g.row_offsets = device_copy(pool, row_offsets);
    g.counts = device_copy(pool, counts);
    g.offsets = device_copy(pool, g.offset);
  }
  const std::vector<int64_t> wanted = batch.logits_rows();
  num_rows = static_cast<int64_t>(wanted.size());
  token_ids = device_copy(pool, batch.token_ids);
  row_ids = device_copy(pool, std::vector<int32_t>(wanted.begin(), wanted.end()));
  positions = device_copy(pool, pos);
  inverse_positions = device_copy(pool, inverse);
  new_slots = device_copy(pool, slots);
  row_tables = device_copy(pool, rows_table);
  seq_tables = device_copy(pool, tables);
  extra_offsets = device_copy(pool, offsets);
  if (floored) decoder_window_floors = device_copy(pool, floors);
}

void CudaV41Model::StepPlan::hash_engram_rows(const ForwardBatch& batch, const V41TextConfig& v,
                                              const std::vector<Layer>& layers, ExpertDispatcher* experts,
                                              ScratchPool& pool) {
  if (v.engram_shard.whole()) {  // hashed on the device, after the step's inputs (CudaV41Model::run_to_logits)
    engram_sources = device_copy(pool, engram_hash_sources(v, batch));
    engram_rows = pool.alloc<int32_t>(std::ssize(v.engram_layer_ids) * num_tokens * v41_engram_columns(v));
  } else {  // hashed here, every row fetched, in order: the gathers read them one after another
    const std::vector<int64_t> rows = deepinfer::engram_rows(v, batch);
    const std::vector<uint8_t> fetched = fetch_engram_rows(rows, v, layers, experts, pool);
    std::vector<int32_t> in_order(rows.size());
    std::iota(in_order.begin(), in_order.end(), 0);
    engram_rows = device_copy(pool, in_order);
    const int64_t n = static_cast<int64_t>(rows.size()), ed = v.engram_head_dim;
    if (layers[v.engram_layer_ids[0]].engram_codes != nullptr) {
      const int64_t row_bytes = engram_row_bytes(true, ed);
      std::vector<uint8_t> codes(n * ed), scales(n * (ed / 32));
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(codes.data() + i * ed, fetched.data() + i * row_bytes, ed);
        std::memcpy(scales.data() + i * (ed / 32), fetched.data() + i * row_bytes + ed, ed / 32);
      }
      fetched_engram_codes = device_copy(pool, codes);
      fetched_engram_scales = device_copy(pool, scales);
    } else {
      fetched_engram_values = reinterpret_cast<const Bf16*>(device_copy(pool, fetched));
    }
  }
}

CudaV41Model::StepState::StepState(const StepPlan& plan, const V41TextConfig& v, int64_t hidden, ScratchPool& pool) {
  const int64_t T = plan.num_tokens, hc = v.hc_mult;
  streams = pool.alloc<float>(T * hc * hidden);
  pre = pool.alloc<float>(T * hc);
  next_pre = pool.alloc<float>(T * hc);
  post = pool.alloc<float>(T * hc);
  comb = pool.alloc<float>(T * hc * hc);
  h = pool.alloc<Bf16>(T * hidden);
  out = pool.alloc<Bf16>(T * hidden);
  selected_ids = pool.alloc<int32_t>(T * v.index_topk);
  selected_counts = pool.alloc<int32_t>(T);
}

CudaV41Model::StepState::StepState(const StepState& full, const StepPlan& kept_plan, const int64_t* kept,
                                   const V41TextConfig& v, int64_t hidden, ScratchPool& pool)
    : StepState(kept_plan, v, hidden, pool) {
  compressed = full.compressed;
  index_keys = full.index_keys;
  selected_ratio = full.selected_ratio;
  candidate_width = full.candidate_width;
  candidate_ratio = full.candidate_ratio;
  const int64_t T = kept_plan.num_tokens, hc = v.hc_mult;
  if (T == 0) return;
  const auto gather = [&](const void* src, int64_t row_bytes, void* dst) {
    cuda::gather_byte_rows(static_cast<const uint8_t*>(src), row_bytes, kept, T, static_cast<uint8_t*>(dst),
                           row_bytes, nullptr);
  };
  gather(full.streams, static_cast<int64_t>(hc * hidden * sizeof(float)), streams);
  gather(full.pre, static_cast<int64_t>(hc * sizeof(float)), pre);
  gather(full.selected_ids, static_cast<int64_t>(v.index_topk * sizeof(int32_t)), selected_ids);
  gather(full.selected_counts, sizeof(int32_t), selected_counts);
  if (full.candidate_mask != nullptr) {
    candidate_mask = pool.alloc<uint8_t>(T * candidate_width);
    gather(full.candidate_mask, candidate_width, candidate_mask);
  }
}

void CudaV41Model::publish_compressed(int64_t l, const StepPlan& plan, StepState& state,
                                      const CudaV41KvCache::Layer& cache_layer) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = layers_[l];
  const int64_t hd = v.head_dim, r = layer.ratio, id = v.index_head_dim;
  const float eps = config_.rms_norm_eps;
  const StepPlan::Groups& groups = plan.groups.at(r);
  const auto S = static_cast<int64_t>(plan.sequences.size());
  const int64_t total = groups.total, fresh_rows = groups.new_total;
  auto* latent = total > 0 ? published_.alloc<Bf16>(total * hd) : nullptr;
  auto* keys = layer.owns_index_keys && total > 0 ? published_.alloc<Bf16>(total * id) : nullptr;
  // The groups cached by earlier steps, from their slots into the layout (padding rows zeroed).
  cuda::gather_fp4_group_entries(cache_layer.entry_codes, cache_layer.entry_scales, hd, CudaV41KvCache::kEntryFormat,
                                 plan.seq_tables, plan.max_blocks, r, groups.cached, groups.offsets, S, groups.width,
                                 plan.fixed_shapes, latent, nullptr);
  if (keys != nullptr)
    cuda::gather_fp4_group_entries(cache_layer.key_codes, cache_layer.key_scales, id, CudaV41KvCache::kKeyFormat,
                                   plan.seq_tables, plan.max_blocks, r, groups.cached, groups.offsets, S,
                                   groups.width, plan.fixed_shapes, keys, nullptr);
  if (fresh_rows > 0) {
    // The groups this step completes. Gated pooling: per channel a softmax over the group's gate values weights
    // its projections. At ratio 1 the gate is the value itself, a softmax over one value: weight 1, the
    // (normalised) value unchanged.
    auto* fresh = scratch_.alloc<Bf16>(fresh_rows * hd);
    cuda::compress_pool_sequences(cache_layer.inputs, cache_layer.input_width, plan.seq_tables, plan.max_blocks,
                                  groups.new_counts, groups.new_offsets, groups.new_first, S, groups.new_width, r, hd,
                                  /*kv_offset=*/0, /*gate_offset=*/r > 1 ? hd : 0, plan.fixed_shapes, fresh, nullptr);
    if (r > 1) cuda::rms_norm(fresh, hd, layer.compressor_norm, fresh, hd, fresh_rows, hd, eps, nullptr);
    if (layer.owns_index_keys) {  // the groups' indexer keys, from the latents before their RoPE
      auto* fresh_keys = scratch_.alloc<Bf16>(fresh_rows * id);
      linear(fresh, layer.indexer_wk, fresh_keys, false, fresh_rows, id, hd);
      cuda::rms_norm(fresh_keys, id, layer.indexer_k_norm, fresh_keys, id, fresh_rows, id, eps, nullptr);
      rotate(fresh_keys + id - v.qk_rope_head_dim, fresh_rows, id, groups.new_positions, 1, true);
      // Cached as the FP4 bytes of the quantisation that follows (taken from the values before it).
      cuda::write_fp4_rows(fresh_keys, id, groups.new_slots, fresh_rows, id, CudaV41KvCache::kKeyFormat,
                           cache_layer.key_codes, cache_layer.key_scales, nullptr);
      cuda::fake_quant_fp4(fresh_keys, fresh_rows, id, id, 32, /*e4m3_scales=*/false, nullptr);
      cuda::write_kv_entries(fresh_keys, id, groups.new_rows, fresh_rows, id, keys, id, nullptr);
    }
    rotate(fresh + hd - v.qk_rope_head_dim, fresh_rows, hd, groups.new_positions, 1, true);
    cuda::write_fp4_rows(fresh, hd, groups.new_slots, fresh_rows, hd, CudaV41KvCache::kEntryFormat,
                         cache_layer.entry_codes, cache_layer.entry_scales, nullptr);
    cuda::fake_quant_fp4(fresh, fresh_rows, hd, hd, 16, /*e4m3_scales=*/true, nullptr);
    cuda::write_kv_entries(fresh, hd, groups.new_rows, fresh_rows, hd, latent, hd, nullptr);
  }
  if (layer.owns_index_keys) state.index_keys = {keys, r};
  state.compressed = {latent, r};
  profiler_.mark("attn:compressed entries");
}

void CudaV41Model::run_indexer(int64_t l, const StepPlan& plan, StepState& state, const Bf16* h,
                               const Bf16* q_residual) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = layers_[l];
  if (state.index_keys.ratio == 0) return;  // no keys published yet: the previous selection stands
  const StepPlan::Groups& keys = plan.groups.at(state.index_keys.ratio);
  const int64_t T = plan.num_tokens, heads = v.index_n_heads, id = v.index_head_dim, K = v.index_topk;
  const int64_t H = config_.hidden_size, width = keys.width;
  // No sequence has a key yet: its rows keep the previous picks (the CPU model's rule), none of which a row of
  // this ratio can use (it sees no compressed entry either).
  if (width == 0 || T == 0) return;
  auto* q = scratch_.alloc<Bf16>(T * heads * id);
  auto* w = scratch_.alloc<float>(T * heads);
  linear(q_residual, layer.indexer_wq_b, q, false, T, heads * id, v.q_lora_rank);
  rotate(q + id - v.qk_rope_head_dim, T * heads, id, plan.positions, heads, true);
  cuda::fake_quant_fp4(q, T * heads, id, id, 32, /*e4m3_scales=*/false, nullptr);
  linear(h, layer.indexer_weights, w, true, T, heads, H);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(id));
  const float heads_scale = 1.0f / std::sqrt(static_cast<float>(heads));
  const int32_t* visible = plan.groups.at(layer.ratio).visible;
  // Scores, candidate masks and picks of every row in one launch each, in rows of `width` entries (-inf past a
  // row's visible entries, which are within its own sequence's): a row of a sequence without keys scores
  // nothing and picks nothing.
  auto* scores = scratch_.alloc<float>(T * width);
  // (Not under --batch-invariant: whether a row's scores take the products would depend on the rows beside it.)
  if (!plan.fixed_shapes && T >= kIndexerProductRows && !config_.batch_invariant) {
    // Prefill: per sequence, the per-head dot products of its rows' queries with its keys on the tensor cores
    // (cuBLAS, in chunks of rows whose products fit kIndexerProductBytes), then their weighted relu sum.
    int64_t largest = 0;
    for (size_t s = 0; s < plan.sequences.size(); ++s)
      largest = std::max(largest, std::min(plan.sequences[s].num_new * heads * keys.count[s],
                                           std::max<int64_t>(kIndexerProductBytes / 4, heads * keys.count[s])));
    auto* dots = scratch_.alloc<float>(largest);
    for (size_t s = 0; s < plan.sequences.size(); ++s) {
      const StepPlan::Sequence& seq = plan.sequences[s];
      const int64_t count = keys.count[s];
      const int64_t chunk = count == 0 ? seq.num_new : std::max<int64_t>(1, largest / (heads * count));
      for (int64_t r0 = 0; r0 < seq.num_new; r0 += chunk) {
        const int64_t n = std::min(chunk, seq.num_new - r0), row = seq.first + r0;
        if (count > 0)
          DI_CUBLAS_CHECK(cuda::gemm_bf16(cublas_.get(), n * heads, count, id, {q + row * heads * id, id},
                                          {state.index_keys.data + keys.offset[s] * id, id}, true, dots, count, 0,
                                          true, 1));
        cuda::indexer_head_sum(dots, count, w + row * heads, visible + row, n, heads, count, width, softmax_scale,
                               heads_scale, scores + row * width, nullptr);
      }
    }
  } else {
    cuda::indexer_scores(q, w, state.index_keys.data, keys.row_offsets, visible, T, heads, id, width, softmax_scale,
                         heads_scale, scores, nullptr);
  }
  const bool masked = layer.uses_candidates && !layer.candidate_source && state.candidate_mask != nullptr;
  if (masked) {
    DI_CHECK(state.candidate_ratio == state.index_keys.ratio && state.candidate_width == width,
             "layer {}: candidate masks over {} entries of ratio {}, indexer keys {} of ratio {}", l,
             state.candidate_width, state.candidate_ratio, width, state.index_keys.ratio);
    cuda::mask_scores(scores, state.candidate_mask, T * width, nullptr);
  }
  if (layer.candidate_source) {
    const int64_t bs = v.candidate_block_size, kb = v.candidate_topk_blocks;
    auto* mask = published_.alloc<uint8_t>(T * width);
    cuda::candidate_blocks(scores, visible, T, width, kb, bs, scratch_.alloc<float>(T * ((width + bs - 1) / bs)),
                           scratch_.alloc<int32_t>(T * kb), scratch_.alloc<int32_t>(T), mask, nullptr);
    state.candidate_mask = mask;
    state.candidate_width = width;
    state.candidate_ratio = state.index_keys.ratio;
  }
  cuda::select_topk(scores, T, width, K, state.selected_ids, state.selected_counts, nullptr);
  state.selected_ratio = state.index_keys.ratio;
  profiler_.mark("attn:indexer");
}

CudaV41Model::QueryAndKv CudaV41Model::project_query_and_kv(const Layer& layer, const Bf16* h, int64_t T,
                                                             const int32_t* positions, bool compress) const {
  const V41TextConfig& v = config_.v41;
  const int64_t heads = v.num_attention_heads, hd = v.head_dim, q_lora = v.q_lora_rank, width = q_lora + hd;
  const float eps = config_.rms_norm_eps;
  // h -> [q residual | K=V] in one product (the weights stacked); K=V normalised and rotated in place.
  auto* proj = scratch_.alloc<Bf16>(T * width);
  QueryAndKv out{scratch_.alloc<Bf16>(T * q_lora), scratch_.alloc<Bf16>(T * heads * hd), proj + q_lora};
  linear(h, layer.q_kv, proj, false, T);
  cuda::rms_norm(proj, width, layer.q_norm, out.q_residual, q_lora, T, q_lora, eps, nullptr);
  linear(out.q_residual, layer.wq_b, out.q, false, T);
  rotate(out.q + hd - v.qk_rope_head_dim, T * heads, hd, positions, heads, compress);
  cuda::rms_norm(out.kv, width, layer.kv_norm, out.kv, width, T, hd, eps, nullptr);
  rotate(out.kv + hd - v.qk_rope_head_dim, T, width, positions, 1, compress);
  return out;
}

void CudaV41Model::attention(int64_t l, const StepPlan& plan, StepState& state,
                             const CudaV41KvCache::Layer& cache_layer, const Bf16* h, Bf16* out) const {
  const V41TextConfig& v = config_.v41;
  const Layer& layer = layers_[l];
  const int64_t T = plan.num_tokens, heads = v.num_attention_heads, hd = v.head_dim;
  const int64_t q_lora = v.q_lora_rank, width = q_lora + hd, K = v.index_topk;
  const float eps = config_.rms_norm_eps;
  const bool compress = layer.ratio > 0;  // these layers rotate with the compress RoPE

  // The queries and K=V, then K=V cached as FP8 codes and scales (the reference's quantisation, as stored); on a KV
  // source the compressor's inputs beside them.
  const QueryAndKv projected = project_query_and_kv(layer, h, T, plan.positions, compress);
  Bf16 *q_residual = projected.q_residual, *q = projected.q, *kv = projected.kv;
  cuda::write_fp8_kv_rows(kv, width, plan.new_slots, T, hd, cache_layer.codes, cache_layer.scales, nullptr);
  if (layer.kv_source) {
    const int64_t parts = layer.compressor.n;  // [kv | gate] at ratio > 1, kv alone at ratio 1
    auto* inputs = scratch_.alloc<Bf16>(T * parts);
    linear(h, layer.compressor, inputs, false, T);
    if (layer.ratio == 1)  // at ratio 1 the compressor's input is cached normalised
      cuda::rms_norm(inputs, parts, layer.compressor_norm, inputs, parts, T, hd, eps, nullptr);
    cuda::write_kv_entries(inputs, parts, plan.new_slots, T, parts, cache_layer.inputs, cache_layer.input_width,
                           nullptr);
  }
  profiler_.mark("attn:projections+cache");

  if (compress) {
    if (layer.kv_source) publish_compressed(l, plan, state, cache_layer);
    if (layer.index_source) run_indexer(l, plan, state, h, q_residual);
  }
  // Each row's slots of picks into the batch's compressed entries (-1: none); then the window plus the picks.
  auto* extra_ids = scratch_.alloc<int32_t>(T * K);
  const bool sparse = compress && state.compressed.ratio != 0;
  if (sparse) {
    const StepPlan::Groups& entries = plan.groups.at(state.compressed.ratio);
    if (state.selected_ratio == 0 || entries.total == 0) {  // nothing picked yet, or nothing to pick from
      DI_CUDA_CHECK(cudaMemsetAsync(extra_ids, 0xff, T * K * sizeof(int32_t), cudaStreamPerThread));
    } else {
      DI_CHECK(state.selected_ratio == state.compressed.ratio,
               "layer {}: the indexer selected over compressed entries of ratio {}, the layer attends ratio {}", l,
               state.selected_ratio, state.compressed.ratio);
      cuda::selected_entry_ids(state.selected_ids, state.selected_counts, T, K, entries.row_offsets, extra_ids,
                               nullptr);
    }
  }
  auto* attn = scratch_.alloc<Bf16>(T * heads * hd);
  // Bounded replay: the decoder layers' windows floored at the prompt's last kept tokens.
  const bool decoder = l >= v41_first_decoder_layer(v);
  const cuda::SparseWindowKeys keys{cache_layer.codes,     cache_layer.scales,
                                    plan.row_tables,       plan.max_blocks,
                                    plan.positions,        v.sliding_window,
                                    state.compressed.data, sparse ? plan.extra_offsets : nullptr,
                                    extra_ids,             decoder ? plan.decoder_window_floors : nullptr};
  cuda::sparse_window_attention(q, keys, layer.attn_sink, T, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                                attn, nullptr);
  profiler_.mark("attn:window+sparse attention");
  project_output(layer, attn, T, plan.inverse_positions, compress, out);
}

void CudaV41Model::project_output(const Layer& layer, Bf16* attn, int64_t T, const int32_t* inverse_positions,
                                  bool compress, Bf16* out) const {
  const V41TextConfig& v = config_.v41;
  const int64_t heads = v.num_attention_heads, hd = v.head_dim;
  // K = V carried RoPE: rotate the outputs back, then the grouped low-rank projection.
  rotate(attn + hd - v.qk_rope_head_dim, T * heads, hd, inverse_positions, heads, compress);
  const int64_t groups = v.o_groups, per_group = heads * hd / groups, rank = v.o_lora_rank;
  auto* low_rank = scratch_.alloc<Bf16>(T * groups * rank);
  const bool invariant = config_.batch_invariant && per_group % 8 == 0;
  if (layer.wo_a.fp8 != nullptr && T <= cuda::kLinearGemvMaxRows && !invariant) {  // a matrix-vector product per group
    for (int64_t g = 0; g < groups; ++g) {
      const Projection w = layer.wo_a.rows(g * rank, rank);
      cuda::linear_gemv_fp8(attn + g * per_group, heads * hd, w.fp8, w.scales, low_rank + g * rank, groups * rank,
                            false, T, rank, per_group, nullptr);
    }
  } else if (T > 0) {
    const Bf16* wo_a = layer.wo_a.bf16;
    if (wo_a == nullptr) {
      auto* dequantised = scratch_.alloc<Bf16>(layer.wo_a.n * layer.wo_a.k);
      cuda::dequantize_fp8_blocks(layer.wo_a.fp8, layer.wo_a.scales, layer.wo_a.n, layer.wo_a.k, dequantised, nullptr);
      wo_a = dequantised;
    }
    const cuda::GemvLayout layout{heads * hd, per_group, rank * per_group, groups * rank, rank, per_group};
    if (invariant) {
      // --batch-invariant: one kernel for every row count, 64 rows a launch (the matrix-vector kernel's sums depend
      // on a row's place in its launch, cuBLAS's on the row count).
      const auto source = layer.wo_a.bf16 == nullptr ? cuda::WeightSource::kFromStream : cuda::WeightSource::kResident;
      for (int64_t first = 0; first < T; first += cuda::kLinearSkinnyMaxRows)
        cuda::batched_linear_skinny(attn + first * heads * hd, wo_a, low_rank + first * groups * rank, groups,
                                    std::min(cuda::kLinearSkinnyMaxRows, T - first), rank, per_group, layout, num_sms_,
                                    nullptr, source);
    } else if (T <= cuda::kLinearGemvMaxRows && per_group % 8 == 0) {
      cuda::batched_gemv(attn, wo_a, low_rank, groups, T, rank, per_group, layout, nullptr);
    } else {
      DI_CUBLAS_CHECK(cuda::gemm_bf16(cublas_.get(), T, rank, per_group, {attn, heads * hd, per_group},
                                      {wo_a, per_group, rank * per_group}, true, low_rank, groups * rank, rank, false,
                                      groups));
    }
  }
  linear(low_rank, layer.wo_b, out, false, T);
  profiler_.mark("attn:output projection");
}

}  // namespace deepinfer
