#include "src/model/deepseek/cuda/cuda_deepseek_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/mla_prepare.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/speculation.cuh"
#include "src/model/cuda/cuda_kv_cache.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_sampling.h"
#include "src/model/deepseek/cuda/cuda_deepseek_blocks.h"
#include "src/model/deepseek/cuda/cuda_deepseek_step.h"
#include "src/model/rope.h"

namespace deepinfer {

CudaDeepseekModel::CudaDeepseekModel(ModelConfig config, const DeviceWeightSource& weights, int device)
    : CudaCausalLm(std::move(config), device) {
  const ModelConfig& c = config_;
  DI_INPUT_CHECK(!c.attention_bias && !c.mlp_bias, "the CUDA backend does not support attention_bias/mlp_bias yet");
  DI_INPUT_CHECK(cuda::mla_prefill_supports(c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim),
                 "the CUDA prefill attention holds qk_head_dim <= 256 and v_head_dim <= 256");
  DI_INPUT_CHECK(c.n_group <= 32, "the CUDA router handles at most 32 expert groups (one lane each); the model has {}",
                 c.n_group);
  DI_INPUT_CHECK(c.n_routed_experts <= cuda::kRouteMaxExperts && c.num_experts_per_tok <= 32,
                 "the CUDA router handles at most {} experts and top-32; the model has {} experts, top-{}",
                 cuda::kRouteMaxExperts, c.n_routed_experts, c.num_experts_per_tok);
  DI_INPUT_CHECK(cuda::mla_decode_supports(c.kv_lora_rank, c.qk_rope_head_dim),
                 "the CUDA decode attention holds kv_lora_rank <= 512 and kv_lora_rank + qk_rope_head_dim <= 768; the "
                 "model has {} + {}", c.kv_lora_rank, c.qk_rope_head_dim);
  const QuantizationConfig& q = c.quantization;
  if (q.fp8 && !q.ue8m0_scales && q.block_rows == q.block_cols && q.block_rows % 16 == 0) fp8_block_ = q.block_rows;
  const RotaryTable rotary(c);
  inv_freq_ = DeviceArray<float>::from_host(rotary.inv_freq());
  attention_factor_ = rotary.attention_factor();

  // Routed experts in FP8 where their tiles line up with the rows of an expert (and of its gate and up).
  const bool fp8_experts =
      fp8_block_ > 0 && c.hidden_size % fp8_block_ == 0 && c.moe_intermediate_size % fp8_block_ == 0;
  const auto expert_format = fp8_experts ? CudaExpertStore::Format::kFp8 : CudaExpertStore::Format::kBf16;
  experts_ = std::make_unique<CudaExpertStore>(
      ExpertStore::Dims{c.num_hidden_layers - c.first_k_dense_replace, c.n_routed_experts, c.hidden_size,
                        c.moe_intermediate_size},
      arena_, num_sms_, static_cast<float>(c.swiglu_limit), expert_format, c.expert_slots_per_rank, fp8_block_);
  moe_ = std::make_unique<CudaMoe>(config_, *experts_, num_sms_, profiler_);
  embed_ = upload(weights, "model.embed_tokens.weight");
  final_norm_ = upload(weights, "model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : upload(weights, "lm_head.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layers_.push_back(upload_layer(weights, l, *experts_, l - c.first_k_dense_replace));
  // The MTP module where the weights carry it (a checkpoint that has it; dummy weights only when asked for:
  // WeightOrigin::dummy_draft_module).
  const std::string mtp_prefix = fmt::format("model.layers.{}.", c.num_hidden_layers);
  if (c.num_nextn_predict_layers > 0 && weights.has(mtp_prefix + "eh_proj.weight")) {
    auto mtp = std::make_unique<Mtp>();
    // Its experts held whole on every rank (weights_held_by keeps them): expert e at place e.
    mtp->experts = std::make_unique<CudaExpertStore>(
        ExpertStore::Dims{1, c.n_routed_experts, c.hidden_size, c.moe_intermediate_size}, arena_, num_sms_,
        static_cast<float>(c.swiglu_limit), expert_format, 0, fp8_block_);
    mtp->layer = upload_layer(weights, c.num_hidden_layers, *mtp->experts, 0);
    mtp->moe = std::make_unique<CudaMoe>(config_, *mtp->experts, num_sms_, profiler_);
    mtp->enorm = upload(weights, mtp_prefix + "enorm.weight");
    mtp->hnorm = upload(weights, mtp_prefix + "hnorm.weight");
    mtp->eh_proj = upload_linear(weights, {mtp_prefix + "eh_proj.weight"}, fp8_block_);
    mtp->head_norm = upload(weights, mtp_prefix + "shared_head.norm.weight");
    mtp->head = upload(weights, mtp_prefix + "shared_head.head.weight");
    mtp_ = std::move(mtp);
  }
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  spdlog::info("CUDA model: {:.2f} GiB of weights on GPU {} ({:.2f} GiB allocated for them; {})",
               arena_.bytes_in_use() / double(1 << 30), device_.id(), arena_.bytes_reserved() / double(1 << 30),
               fp8_block_ > 0 ? fmt::format("FP8 as stored, fp32 scales a {} x {} tile, where the "
                                                          "checkpoint has FP8; the rest bf16", fp8_block_, fp8_block_)
                                            : "bf16");
}

CudaDeepseekModel::Layer CudaDeepseekModel::upload_layer(const DeviceWeightSource& weights, int64_t l,
                                                         CudaExpertStore& experts, int64_t moe_layer) {
  const ModelConfig& c = config_;
  const int64_t I = c.moe_intermediate_size, E = c.n_routed_experts;
  const std::string p = fmt::format("model.layers.{}.", l);
  Layer layer;
  layer.input_norm = upload(weights, p + "input_layernorm.weight");
  layer.post_attention_norm = upload(weights, p + "post_attention_layernorm.weight");
  Attention& a = layer.attention;
  const std::string s = p + "self_attn.";
  // The query's first projection and kv_a both read h: stored back to back, a decode step runs them as one.
  const std::string first = s + (c.q_lora_rank > 0 ? "q_a_proj.weight" : "q_proj.weight");
  const std::string kv_a = s + "kv_a_proj_with_mqa.weight";
  a.first_and_kv_a = upload_linear(weights, {first, kv_a}, fp8_block_);
  if (c.q_lora_rank > 0) {
    a.q_a_norm = upload(weights, s + "q_a_layernorm.weight");
    a.q_b = upload_linear(weights, {s + "q_b_proj.weight"}, fp8_block_);
  }
  a.kv_a_norm = upload(weights, s + "kv_a_layernorm.weight");
  a.kv_b = upload(weights, s + "kv_b_proj.weight");
  // (the skinny kernel reads x, w rows in 16-byte pieces: every stride a multiple of 8 elements)
  if (c.batch_invariant && c.qk_nope_head_dim % 8 == 0 && c.qk_head_dim() % 8 == 0 && c.kv_entry_dim() % 8 == 0)
    a.w_uk_t = transposed_w_uk(a.kv_b);
  a.o = upload_linear(weights, {s + "o_proj.weight"}, fp8_block_);
  layer.is_moe = c.is_moe_layer(l);
  if (layer.is_moe) {
    CudaMoeWeights& m = layer.moe;
    m.router = upload(weights, p + "mlp.gate.weight");
    if (c.has_correction_bias) {
      auto* dst = static_cast<float*>(arena_.take(E * sizeof(float)));
      weights.fill_f32(p + "mlp.gate.e_score_correction_bias", {E}, dst);
      m.router_bias = dst;
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string prefix = fmt::format("{}mlp.experts.{}.", p, e);
      if (!weights.has(prefix + "gate_proj.weight")) continue;  // another EP rank's
      experts.load(moe_layer, e, weights, prefix + "gate_proj.weight", prefix + "up_proj.weight",
                   prefix + "down_proj.weight");
    }
    m.has_shared = c.n_shared_experts > 0;
    if (m.has_shared) m.shared = upload_mlp(weights, p + "mlp.shared_experts", I * c.n_shared_experts);
  } else {
    layer.mlp = upload_mlp(weights, p + "mlp", c.intermediate_size);
  }
  return layer;
}

CudaDeepseekModel::Bf16* CudaDeepseekModel::transposed_w_uk(const Bf16* kv_b) {
  // Once at load, on the host: kv_b is [heads, nope + v, lora]; head h's W_uk is its first nope rows.
  const ModelConfig& c = config_;
  const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, lora = c.kv_lora_rank;
  std::vector<Bf16> kv_b_host(heads * (nope + v) * lora), w_uk_t(heads * lora * nope);
  DI_CUDA_CHECK(cudaMemcpy(kv_b_host.data(), kv_b, kv_b_host.size() * sizeof(Bf16), cudaMemcpyDeviceToHost));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t j = 0; j < lora; ++j)
        w_uk_t[(h * lora + j) * nope + i] = kv_b_host[(h * (nope + v) + i) * lora + j];
  auto* dst = static_cast<Bf16*>(arena_.take(w_uk_t.size() * sizeof(Bf16)));
  DI_CUDA_CHECK(cudaMemcpy(dst, w_uk_t.data(), w_uk_t.size() * sizeof(Bf16), cudaMemcpyHostToDevice));
  return dst;
}

DeviceMlp CudaDeepseekModel::upload_mlp(const DeviceWeightSource& weights, const std::string& prefix,
                                        int64_t inter) {
  Mlp mlp;
  mlp.inter = inter;
  mlp.gate_up = upload_linear(weights, {prefix + ".gate_proj.weight", prefix + ".up_proj.weight"}, fp8_block_);
  mlp.down = upload_linear(weights, {prefix + ".down_proj.weight"}, fp8_block_);
  return mlp;
}

std::unique_ptr<KvCache> CudaDeepseekModel::make_kv_cache(int64_t num_blocks) const {
  DI_CUDA_CHECK(cudaSetDevice(device_.id()));
  return std::make_unique<CudaMlaKvCache>(num_cache_layers(), num_blocks, config_.kv_entry_dim());
}

void CudaDeepseekModel::enable() {
  mtp_enabled_ = true;  // its MLA layer in the caches made from now on, after the model's
}

void CudaDeepseekModel::attention(int64_t layer_idx, const Attention& w, const StepPlan& plan, Bf16* cache_layer,
                                  const Bf16* h, Bf16* out, ScratchPool& scratch, const int32_t* read_rows,
                                  int64_t num_read) const {
  const ModelConfig& c = config_;
  const int64_t T = plan.num_tokens, heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, qk = c.qk_head_dim(), v = c.v_head_dim;
  const int64_t lora = c.kv_lora_rank, D = c.kv_entry_dim();
  cublasHandle_t blas = cublas_.get();
  (void)layer_idx;

  // The query's first projection (q, or q_a) and kv_a. Decode runs them as one product (their weights are back to
  // back), so both live in rows of first_rows + D; the prefill kernel wants q and kv rows of their own.
  const bool q_lora = c.q_lora_rank > 0;
  const int64_t first_rows = q_lora ? c.q_lora_rank : heads * qk;
  Bf16 *first, *kv;
  int64_t first_stride = first_rows, kv_stride = D;
  if (plan.absorbed) {
    first = scratch.alloc<Bf16>(T * (first_rows + D));
    kv = first + first_rows;
    first_stride = kv_stride = first_rows + D;
    linear(h, w.first_and_kv_a, first, false, T, scratch);
  } else {
    first = scratch.alloc<Bf16>(T * first_rows);
    kv = scratch.alloc<Bf16>(T * D);
    linear(h, w.first_and_kv_a.rows(0, first_rows), first, false, T, scratch);
    linear(h, w.first_and_kv_a.rows(first_rows, D), kv, false, T, scratch);
  }
  Bf16* q = first;
  int64_t q_stride = first_stride;
  if (q_lora) {
    auto* q_a = scratch.alloc<Bf16>(T * c.q_lora_rank);
    cuda::rms_norm(first, first_stride, w.q_a_norm, q_a, c.q_lora_rank, T, c.q_lora_rank, c.rms_norm_eps, nullptr);
    q = scratch.alloc<Bf16>(T * heads * qk);
    q_stride = heads * qk;
    linear(q_a, w.q_b, q, false, T, scratch);
  }
  // The absorbed form's queries [W_uk^T q_nope | RoPE'd q_pe]: the tail is written by mla_prepare. A few rows:
  // matrix-vector kernels for W_uk and W_uv, all heads in one launch each (each head's W_uk, W_uv read once; rows
  // of lora in 16-byte pieces), W_uk's in mla_prepare's launch.
  Bf16* q_latent = plan.absorbed ? scratch.alloc<Bf16>(T * heads * D) : nullptr;
  const bool gemv = plan.absorbed && T <= kGemvMaxLinearRows && lora % 8 == 0 && !c.batch_invariant;
  const cuda::MlaPrepareShape prepare_shape{T, heads, lora, rope, nope, q_stride, kv_stride};
  if (gemv) {
    cuda::mla_prepare_absorb(kv, w.kv_a_norm, c.rms_norm_eps, q, plan.positions, inv_freq_.data(), attention_factor_,
                             c.rope.interleaved, plan.new_slots, cache_layer, q_latent, prepare_shape, w.kv_b,
                             (nope + v) * lora, nullptr);
  } else {
    cuda::mla_prepare(kv, w.kv_a_norm, c.rms_norm_eps, q, plan.positions, inv_freq_.data(), attention_factor_,
                      c.rope.interleaved, plan.new_slots, cache_layer, q_latent, prepare_shape, nullptr);
  }
  profiler_.mark("attn:projections+rope");

  // Every row's latent is in the cache now; with read_rows only those rows attend on (A of them).
  const int64_t A = read_rows != nullptr ? num_read : T;
  auto* attn = scratch.alloc<Bf16>(A * heads * v);
  const float scale = c.softmax_scale();
  if (plan.absorbed) {
    // Fold W_uk into the queries (done above for a few rows); attend over the latent cache; unfold with W_uv.
    if (w.w_uk_t != nullptr) {
      // --batch-invariant: one kernel for every row count, 64 rows a launch (as W_uv below).
      const cuda::GemvLayout uk_layout{q_stride, qk, lora * nope, heads * D, D, nope};
      for (int64_t first = 0; first < T; first += cuda::kLinearSkinnyMaxRows)
        cuda::batched_linear_skinny(q + first * q_stride, w.w_uk_t, q_latent + first * heads * D, heads,
                                    std::min(cuda::kLinearSkinnyMaxRows, T - first), lora, nope, uk_layout, num_sms_,
                                    nullptr);
    } else if (!gemv) {
      DI_CUBLAS_CHECK(cuda::gemm_bf16(blas, T, lora, nope, {q, q_stride, qk}, {w.kv_b, lora, (nope + v) * lora},
                                      false, q_latent, heads * D, D, false, heads));
    }
    const Bf16* queries = q_latent;
    const int32_t* block_table = plan.block_table;
    const int32_t* seq_lens = plan.seq_lens;
    if (read_rows != nullptr) {
      auto* q_read = scratch.alloc<Bf16>(A * heads * D);
      auto* table_read = scratch.alloc<int32_t>(A * plan.max_blocks);
      auto* lens_read = scratch.alloc<int32_t>(A);
      cuda::embedding(q_latent, read_rows, q_read, A, heads * D, nullptr);  // row gathers
      cuda::gather_int32_rows(plan.block_table, plan.max_blocks, read_rows, A, table_read, nullptr);
      cuda::gather_int32_rows(plan.seq_lens, 1, read_rows, A, lens_read, nullptr);
      queries = q_read;
      block_table = table_read;
      seq_lens = lens_read;
    }
    const bool gemv_rows = plan.absorbed && A <= kGemvMaxLinearRows && lora % 8 == 0 && !c.batch_invariant;
    const int64_t splits = decode_splits(A, plan.max_len);
    const int64_t rows_per_launch =
        c.batch_invariant ? std::max<int64_t>(1, kInvariantWorkspaceBytes / static_cast<int64_t>(
                                                         cuda::mla_decode_workspace_bytes(1, heads, lora, splits)))
                          : std::max<int64_t>(A, 1);
    auto* workspace = scratch.alloc<float>(
        cuda::mla_decode_workspace_bytes(std::min(A, rows_per_launch), heads, lora, splits) / sizeof(float));
    profiler_.mark("attn:absorb");
    const Bf16* w_uv = w.kv_b + nope * lora;  // W_uv: each head's last v rows of kv_b, (nope + v) * lora apart
    if (gemv_rows && cuda::mla_decode_projected_supports(lora, rope, splits)) {
      // A few rows over several splits: W_uv folded into the split combine, one launch less (mla_decode.cuh). It
      // pays at batch 1-2 only: each block projects one head of one row, so W_uv is re-read from L2 for every row
      // (results/h200/design-measurements.md).
      cuda::mla_decode_attention_projected(queries, cache_layer, block_table, plan.max_blocks, seq_lens, A,
                                           heads, lora, rope, scale, splits, workspace,
                                           {w_uv, v, (nope + v) * lora}, attn, nullptr);
      profiler_.mark("attn:decode kernel+unabsorb");
    } else {
      auto* o_latent = scratch.alloc<Bf16>(A * heads * lora);
      // (--batch-invariant: rows_per_launch bounds the workspace of the splits the longest sequence needs; a row's
      // result does not depend on its launch.)
      for (int64_t first = 0; first < A; first += rows_per_launch)
        cuda::mla_decode_attention(queries + first * heads * D, cache_layer, block_table + first * plan.max_blocks,
                                   plan.max_blocks, seq_lens + first, std::min(rows_per_launch, A - first), heads,
                                   lora, rope, scale, splits, workspace, o_latent + first * heads * lora, nullptr,
                                   c.batch_invariant ? invariant_keys_per_split() : 0, mla_decode_kernel_);
      profiler_.mark("attn:decode kernel");
      // W_uv's products above the matrix-vector kernel's rows: the skinny tensor-core kernel up to its 64 rows,
      // faster than cuBLAS's batched GEMM for these 2 MB (benchmarks/linear_bench;
      // results/h200/design-measurements.md).
      const cuda::GemvLayout uv_layout{heads * lora, lora, (nope + v) * lora, heads * v, v, lora};
      if (c.batch_invariant && lora % 8 == 0) {
        // One kernel for every row count, in launches of at most 64 rows (the skinny kernel's rows do not depend
        // on their launch: benchmarks/batch_invariance_probe).
        for (int64_t first = 0; first < A; first += cuda::kLinearSkinnyMaxRows)
          cuda::batched_linear_skinny(o_latent + first * heads * lora, w_uv, attn + first * heads * v, heads,
                                      std::min(cuda::kLinearSkinnyMaxRows, A - first), v, lora, uv_layout, num_sms_,
                                      nullptr);
      } else if (gemv_rows) {
        cuda::batched_gemv(o_latent, w_uv, attn, heads, A, v, lora, uv_layout, nullptr);
      } else if (A <= cuda::kLinearSkinnyMaxRows && lora % 8 == 0) {
        cuda::batched_linear_skinny(o_latent, w_uv, attn, heads, A, v, lora, uv_layout, num_sms_, nullptr);
      } else {
        DI_CUBLAS_CHECK(cuda::gemm_bf16(blas, A, v, lora, {o_latent, heads * lora, lora},
                                        {w_uv, lora, (nope + v) * lora}, true, attn, heads * v, v, false, heads));
      }
    }
  } else {
    // Decompress every context latent into per-head keys and values, then attend causally.
    auto* context = scratch.alloc<Bf16>(plan.num_keys * D);
    cuda::gather_kv_entries(cache_layer, plan.key_slots, plan.num_keys, D, context, nullptr);
    auto* kv_expanded = scratch.alloc<Bf16>(plan.num_keys * heads * (nope + v));
    DI_CUBLAS_CHECK(cuda::gemm_bf16(blas, plan.num_keys, heads * (nope + v), lora, {context, D}, {w.kv_b, lora}, true,
                                    kv_expanded, heads * (nope + v), 0, false, 1));
    profiler_.mark("attn:expand kv");
    auto* attn_all = read_rows != nullptr ? scratch.alloc<Bf16>(T * heads * v) : attn;
    DI_CHECK(cuda::mla_prefill_attention(q, kv_expanded, context + lora, D, plan.q_seq, plan.q_pos, plan.cu_k,
                                         plan.tiles, plan.num_tiles, heads, nope, rope, v, scale, attn_all, nullptr,
                                         mla_prefill_kernel_, T, plan.num_keys),
             "the prefill attention took no kernel (q.k {} + {}, v {})", nope, rope, v);
    if (read_rows != nullptr) cuda::embedding(attn_all, read_rows, attn, A, heads * v, nullptr);
    profiler_.mark("attn:prefill kernel");
  }
  linear(attn, w.o, out, false, A, scratch);
  profiler_.mark("attn:unabsorb+o_proj");
}

CudaDeepseekModel::StepPlan CudaDeepseekModel::make_plan(const ForwardBatch& batch, bool absorbed,
                                                          ScratchPool& scratch) const {
  const ModelConfig& c = config_;
  StepPlan plan;
  plan.num_tokens = batch.num_tokens();
  plan.absorbed = absorbed;
  std::vector<int32_t> positions, q_seq, q_pos, cu_k = {0}, table, lens;
  std::vector<int64_t> new_slots, key_slots;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    const int64_t context = seq.num_cached + seq.num_new;
    for (int64_t i = 0; i < seq.num_new; ++i) {
      positions.push_back(static_cast<int32_t>(seq.num_cached + i));
      q_seq.push_back(static_cast<int32_t>(s));
      q_pos.push_back(static_cast<int32_t>(seq.num_cached + i));
    }
    const std::vector<int64_t> slots = slots_of(seq.block_table, seq.num_cached, seq.num_new);
    new_slots.insert(new_slots.end(), slots.begin(), slots.end());
    plan.max_blocks = std::max<int64_t>(plan.max_blocks, static_cast<int64_t>(seq.block_table.size()));
    plan.max_len = std::max(plan.max_len, context);
    if (!plan.absorbed) {
      const std::vector<int64_t> keys = slots_of(seq.block_table, 0, context);
      key_slots.insert(key_slots.end(), keys.begin(), keys.end());
      cu_k.push_back(static_cast<int32_t>(key_slots.size()));
    }
  }
  if (plan.absorbed) {
    // One query row per decode-kernel "sequence": row i of a sequence sees its positions up to its own.
    table.assign(plan.num_tokens * plan.max_blocks, 0);
    int64_t row = 0;
    for (const SequenceChunk& seq : batch.sequences)
      for (int64_t i = 0; i < seq.num_new; ++i, ++row) {
        std::copy(seq.block_table.begin(), seq.block_table.end(), table.begin() + row * plan.max_blocks);
        lens.push_back(static_cast<int32_t>(seq.num_cached + i + 1));
      }
    plan.block_table = device_copy(scratch, table);
    plan.seq_lens = device_copy(scratch, lens);
  } else {
    plan.num_keys = static_cast<int64_t>(key_slots.size());
    plan.key_slots = device_copy(scratch, key_slots);
    plan.q_seq = device_copy(scratch, q_seq);
    plan.q_pos = device_copy(scratch, q_pos);
    plan.cu_k = device_copy(scratch, cu_k);
    const std::vector<int32_t> tiles = cuda::mla_prefill_tiles(q_seq, c.qk_nope_head_dim, c.qk_rope_head_dim,
                                                               c.v_head_dim, mla_prefill_kernel_);
    plan.tiles = device_copy(scratch, tiles);
    plan.num_tiles = static_cast<int64_t>(tiles.size()) - 1;
  }
  plan.positions = device_copy(scratch, positions);
  plan.new_slots = device_copy(scratch, new_slots);
  return plan;
}

float* CudaDeepseekModel::run_to_logits(const ForwardBatch& batch, KvCache& kv_cache, ExpertDispatcher* experts,
                                        int64_t* num_rows) const {
  auto* cache = dynamic_cast<CudaMlaKvCache*>(&kv_cache);
  DI_CHECK(cache != nullptr, "the CUDA model needs a device MLA cache");
  DI_CUDA_CHECK(cudaSetDevice(device_.id()));
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens(), H = c.hidden_size;
  ScratchPool& scratch = scratch_;
  scratch.reset();

  // A speculative verify step is decode rows too: each row attends to its own prefix through the absorbed kernels
  // (as FlashMLA verifies several queries a sequence), rather than expanding every sequence's whole context.
  // --batch-invariant: every row absorbed (prompt rows too), so a row's attention is one kernel's arithmetic whatever
  // the batch — an expanded prefill's products run over all the batch's keys at once.
  const bool absorbed =
      batch.attention_path == AttentionPath::kAbsorbed ||
      (batch.attention_path == AttentionPath::kAuto &&
       (c.batch_invariant || batch.speculative_verify ||
        std::all_of(batch.sequences.begin(), batch.sequences.end(), [](const SequenceChunk& s) { return s.num_new == 1; })));
  const StepPlan plan = make_plan(batch, absorbed, scratch);

  const std::vector<int64_t> wanted = batch.logits_rows();
  const std::vector<int32_t> rows(wanted.begin(), wanted.end());
  const auto R = static_cast<int64_t>(rows.size());
  int32_t* token_ids = device_copy(scratch, batch.token_ids);
  const int32_t* row_ids = device_copy(scratch, rows);
  *num_rows = R;
  // With the MTP module: where the step leaves its rows' final-normed hidden states (allocated here, outside the
  // graphed part, so a replayed step writes where its capture did).
  Bf16* kept_hidden = mtp_enabled_ ? scratch.alloc<Bf16>(T * H) : nullptr;
  last_hidden_ = kept_hidden;
  last_hidden_rows_ = kept_hidden != nullptr ? T : 0;
  begin_device_work(batch, token_ids, scratch);

  auto run = [&]() -> float* {
    CudaBlocks blocks{*this, plan, *cache, experts, scratch, token_ids, row_ids, kept_hidden, T, H, R};
    return run_deepseek_layers(c, blocks);
  };

  // Decode steps whose experts need no host round trip replay a CUDA graph of `run` (decode_graphs.h): the
  // uploads above and the allocations in `run` happen in the same order every step of a shape.
  const bool graphable =
      plan.absorbed && T > 0 && may_graph(experts, layers_.back().is_moe ? T * c.num_experts_per_tok : 0);
  if (!graphable) return run();
  return graphs_.run({T, plan.max_blocks, R, cache->layer_data(0), decode_splits(T, plan.max_len)}, run, {&scratch});
}

int64_t CudaDeepseekModel::invariant_keys_per_split() const {
  return std::max<int64_t>(256, (config_.max_position_embeddings + cuda::kMlaDecodeMaxSplits - 1) /
                                    cuda::kMlaDecodeMaxSplits);
}

namespace {

bool environment_is(const char* name, std::string_view value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::string_view(set) == value;
}

}  // namespace

cuda::MlaDecodeKernel CudaDeepseekModel::mla_decode_kernel_from_environment() {
  if (environment_is("DEEPINFER_MLA_WGMMA", "0")) return cuda::MlaDecodeKernel::kMmaSync;
  return environment_is("DEEPINFER_MLA_SEESAW", "1") ? cuda::MlaDecodeKernel::kSeesaw : cuda::MlaDecodeKernel::kWgmma;
}

cuda::MlaPrefillKernel CudaDeepseekModel::mla_prefill_kernel_from_environment() {
  if (environment_is("DEEPINFER_MLA_WGMMA", "0")) return cuda::MlaPrefillKernel::kMmaSync;
  return environment_is("DEEPINFER_MLA_PREFILL_TMA", "1") ? cuda::MlaPrefillKernel::kTma
                                                          : cuda::MlaPrefillKernel::kWgmma;
}

int64_t CudaDeepseekModel::decode_splits(int64_t num_tokens, int64_t max_len) const {
  if (num_tokens == 0) return 1;  // a rank with no rows this step still runs it with its expert-parallel group
  // --batch-invariant: chunks of a fixed number of keys (invariant_keys_per_split), enough of them for the longest
  // sequence; the splits past a shorter sequence's keys are empty and weigh nothing in its combine.
  if (config_.batch_invariant) {
    const int64_t splits = (max_len + invariant_keys_per_split() - 1) / invariant_keys_per_split();
    DI_CHECK(splits <= cuda::kMlaDecodeMaxSplits, "a sequence of {} tokens is past the {} the model takes", max_len,
             config_.max_position_embeddings);
    return std::max<int64_t>(splits, 1);
  }
  // The kernel's shape decides (mla_decode.cuh); 1-2 rows take the projected form, on the mma.sync kernel.
  const cuda::MlaDecodeKernel kernel =
      num_tokens > kGemvMaxLinearRows ? mla_decode_kernel_ : cuda::MlaDecodeKernel::kMmaSync;
  return cuda::mla_decode_splits(num_tokens, config_.num_attention_heads, config_.kv_lora_rank,
                                 config_.qk_rope_head_dim, max_len, num_sms_, kernel);
}

float* CudaDeepseekModel::mtp_logits(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                     KvCache& kv_cache, int64_t* num_rows, const MtpDeviceInputs* device_inputs) const {
  DI_CHECK(mtp_enabled_, "mtp_forward before the MTP module was enabled");
  auto* cache = dynamic_cast<CudaMlaKvCache*>(&kv_cache);
  DI_CHECK(cache != nullptr && cache->num_layers() == num_cache_layers(), "the MTP module needs a device MLA cache "
           "made after the MTP module was enabled");
  DI_CUDA_CHECK(cudaSetDevice(device_.id()));
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens(), H = c.hidden_size, m = c.num_hidden_layers;
  const float eps = c.rms_norm_eps;
  check_batch(batch, c.vocab_size);
  DI_CHECK(static_cast<int64_t>(hidden_rows.size()) == T, "{} hidden rows for {} tokens", hidden_rows.size(), T);
  std::vector<int32_t> hidden_ids;
  for (const int64_t row : hidden_rows) {
    DI_CHECK(row >= 0 && row < last_hidden_rows_, "hidden row {} of the last step's {}", row, last_hidden_rows_);
    hidden_ids.push_back(static_cast<int32_t>(row));
  }
  // Its own pool: the main step's scratch holds the hidden states read here.
  ScratchPool& scratch = mtp_scratch_;
  if (device_inputs == nullptr) scratch.reset();  // (else the caller reset it: the inputs are in it)
  // The module runs a step's new rows again: one or a few a sequence at decode (the absorbed kernels, as a verify
  // step), a prompt chunk at prefill (expanded).
  const bool absorbed =
      c.batch_invariant || std::all_of(batch.sequences.begin(), batch.sequences.end(), [](const SequenceChunk& s) {
        return s.num_new <= kMtpAbsorbedMaxRows;
      });
  const StepPlan plan = make_plan(batch, absorbed, scratch);
  const std::vector<int64_t> wanted = batch.logits_rows();
  const int64_t R = device_inputs != nullptr ? std::ssize(batch.sequences) : std::ssize(wanted);
  const int32_t* token_ids =
      device_inputs != nullptr ? device_inputs->token_ids : device_copy(scratch, batch.token_ids);
  const int32_t* hidden_at = device_copy(scratch, hidden_ids);
  const int32_t* row_ids = device_inputs != nullptr
                               ? device_inputs->row_ids
                               : device_copy(scratch, std::vector<int32_t>(wanted.begin(), wanted.end()));
  *num_rows = R;
  auto* x = scratch.alloc<Bf16>(T * H);
  auto* h = scratch.alloc<Bf16>(T * H);
  auto* delta = scratch.alloc<Bf16>(T * H);
  auto* joined = scratch.alloc<Bf16>(T * 2 * H);
  const Mtp& w = *mtp_;
  // x = eh_proj([enorm(embed(next token)) ; hnorm(h)])
  cuda::embedding(embed_, token_ids, delta, T, H, nullptr);
  cuda::rms_norm(delta, H, w.enorm, joined, 2 * H, T, H, eps, nullptr);
  cuda::embedding(last_hidden_, hidden_at, h, T, H, nullptr);  // a row gather
  cuda::rms_norm(h, H, w.hnorm, joined + H, 2 * H, T, H, eps, nullptr);
  linear(joined, w.eh_proj, x, false, T, scratch);
  // One decoder layer with its own cache layer (index num_hidden_layers) and experts.
  cuda::add_rms_norm(nullptr, x, w.layer.input_norm, h, T, H, eps, nullptr);
  // Every row's latent goes into the module's cache; past that only the rows read (one a sequence) go on: a row's
  // attention and feed-forward output reach nothing but its own logits. So a prompt chunk (at prefill) or a chained
  // step's every verify row costs the module's projections and its cache writes, the read rows the rest.
  auto* x_read = scratch.alloc<Bf16>(R * H);
  auto* h_read = scratch.alloc<Bf16>(R * H);
  auto* ffn_out = scratch.alloc<Bf16>(R * H);
  cuda::embedding(x, row_ids, x_read, R, H, nullptr);  // a row gather: the read rows' residual
  attention(m, w.layer.attention, plan, static_cast<Bf16*>(cache->layer_data(m)), h, delta, scratch, row_ids, R);
  cuda::add_rms_norm(delta, x_read, w.layer.post_attention_norm, h_read, R, H, eps, nullptr);
  if (w.layer.is_moe) w.moe->run(0, w.layer.moe, h_read, ffn_out, R, nullptr, scratch, nullptr);
  else device_mlp(main_lane(), w.layer.mlp, h_read, ffn_out, R, H, scratch, num_sms_);
  cuda::add_rms_norm(ffn_out, x_read, w.head_norm, h_read, R, H, eps, nullptr);
  auto* logits = scratch.alloc<float>(R * c.vocab_size);
  linear(h_read, w.head, logits, true, R, c.vocab_size, H);
  DI_CUDA_CHECK(cudaGetLastError());
  return logits;
}

Tensor CudaDeepseekModel::mtp_forward(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                                      KvCache& cache) const {
  int64_t rows = 0;
  const float* logits = mtp_logits(batch, hidden_rows, cache, &rows);
  Tensor out = Tensor::zeros({rows, config_.vocab_size});
  DI_CUDA_CHECK(cudaMemcpy(out.data<float>(), logits, out.nbytes(), cudaMemcpyDeviceToHost));
  return out;
}

std::vector<MtpDraft> CudaDeepseekModel::mtp_draft(const ForwardBatch& batch,
                                                             std::span<const int64_t> hidden_rows,
                                                             KvCache& cache) const {
  int64_t rows = 0;
  idle_.record_start();  // (the draft is a step of its own to the idle meter: the host's work since the verify step)
  const float* logits = mtp_logits(batch, hidden_rows, cache, &rows);
  // Only the drafts and their confidences come back.
  auto* tokens = mtp_scratch_.alloc<int32_t>(rows);
  auto* probability = mtp_scratch_.alloc<float>(rows);
  cuda::argmax_rows(logits, rows, config_.vocab_size, tokens, probability, nullptr);
  idle_.record_end();
  std::vector<int32_t> host_tokens(rows);
  std::vector<float> host_probability(rows);
  DI_CUDA_CHECK(cudaMemcpy(host_tokens.data(), tokens, rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
  DI_CUDA_CHECK(cudaMemcpy(host_probability.data(), probability, rows * sizeof(float), cudaMemcpyDeviceToHost));
  idle_.measure();
  std::vector<MtpDraft> drafts(rows);
  for (int64_t r = 0; r < rows; ++r) drafts[r] = {host_tokens[r], host_probability[r]};
  return drafts;
}

void CudaDeepseekModel::start_chained_draft(const ForwardBatch& verify, KvCache& cache,
                                            std::span<const SamplingRow>) const {
  const int64_t S = std::ssize(verify.sequences), T = verify.num_tokens();
  chain_.begin(S);
  // The module over every row of the verify step, each at its position with the step's hidden state there and the
  // token after it (set on the device: a draft while accepted, then the sequence's next token), read at the last
  // accepted row. The rows past it write the module's cache beyond the sequence's count, as the verify step's
  // rejected rows write the main layers': the next step writes those positions again before any row reads them.
  ForwardBatch mtp;
  mtp.sequences = verify.sequences;
  mtp.token_ids.assign(T, 0);
  std::vector<int64_t> hidden_rows(T);
  std::vector<int32_t> first_rows, num_rows;
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < T; ++t) hidden_rows[t] = t;
  for (const SequenceChunk& seq : verify.sequences) {
    first_rows.push_back(first_rows.empty() ? 0 : first_rows.back() + num_rows.back());
    num_rows.push_back(static_cast<int32_t>(seq.num_new));
    positions.push_back(seq.num_cached + 1);  // the next token's, before each accepted draft moves it by one
  }
  mtp_scratch_.reset();
  auto* tokens = mtp_scratch_.alloc<int32_t>(T);
  auto* rows = mtp_scratch_.alloc<int32_t>(S);
  idle_.record_start();  // (the draft is a step of its own to the idle meter)
  cuda::chain_mtp_inputs(step_token_ids_, chain_.accepted(), chain_.anchors(), device_copy(mtp_scratch_, first_rows),
                         device_copy(mtp_scratch_, num_rows), S, tokens, rows, nullptr);
  const MtpDeviceInputs inputs{tokens, rows};
  int64_t logits_rows = 0;
  const float* logits = mtp_logits(mtp, hidden_rows, cache, &logits_rows, &inputs);
  const DraftChain::Outputs out = chain_.outputs(S);
  cuda::argmax_rows(logits, S, config_.vocab_size, out.tokens, out.score_a, nullptr);
  idle_.record_end();
  chain_.started(std::move(positions), S);
}

std::vector<DraftBlock> CudaDeepseekModel::finish_chained_draft() const {
  const DraftChain::Results r = chain_.finish();
  idle_.measure();
  const auto S = std::ssize(r.positions);
  std::vector<DraftBlock> blocks(S);
  check_drawn_tokens(std::vector<int32_t>(r.tokens, r.tokens + S), config_.vocab_size);
  for (int64_t s = 0; s < S; ++s) blocks[s] = {{r.tokens[s]}, {r.score_a[s]}, r.positions[s]};
  return blocks;
}

}  // namespace deepinfer
