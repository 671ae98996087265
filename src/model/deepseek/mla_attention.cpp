// Multi-head latent attention over the paged latent cache, in its two forms (see AttentionPath).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/ops.h"
#include "src/model/deepseek/deepseek_model.h"

namespace deepinfer {

namespace {

cpu::RopeLayout rope_layout(const ModelConfig& c) {
  return c.rope.interleaved ? cpu::RopeLayout::kInterleaved : cpu::RopeLayout::kHalf;
}

bool use_absorbed(const ForwardBatch& batch) {
  if (batch.attention_path != AttentionPath::kAuto) return batch.attention_path == AttentionPath::kAbsorbed;
  return batch.speculative_verify || std::all_of(batch.sequences.begin(), batch.sequences.end(),
                     [](const SequenceChunk& s) { return s.num_new == 1; });
}

}  // namespace

void DeepseekModel::attention(int64_t layer_idx, const Attention& w, const ForwardBatch& batch,
                              const int32_t* positions, const float* cos, const float* sin, const float* x,
                              float* out, MlaKvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const int64_t H = c.hidden_size;
  const int64_t heads = c.num_attention_heads;
  const int64_t d_nope = c.qk_nope_head_dim;
  const int64_t d_rope = c.qk_rope_head_dim;
  const int64_t d_qk = c.qk_head_dim();
  const int64_t d_v = c.v_head_dim;
  const int64_t d_latent = c.kv_lora_rank;
  const int64_t d_entry = c.kv_entry_dim();
  const float scale = c.softmax_scale();

  // Queries [T, heads, d_qk] with RoPE on their last d_rope channels.
  std::vector<float> q(T * heads * d_qk);
  if (c.q_lora_rank > 0) {
    std::vector<float> q_latent(T * c.q_lora_rank);
    cpu::linear(x, w.q_a.weight, w.q_a.bias, q_latent.data(), T, c.q_lora_rank, H);
    cpu::rms_norm(q_latent.data(), w.q_a_norm, q_latent.data(), T, c.q_lora_rank, c.rms_norm_eps);
    cpu::linear(q_latent.data(), w.q_b.weight, nullptr, q.data(), T, heads * d_qk, c.q_lora_rank);
  } else {
    cpu::linear(x, w.q.weight, nullptr, q.data(), T, heads * d_qk, H);
  }
  cpu::rope(q.data() + d_nope, T * heads, d_qk, d_rope, cos, sin, heads, rope_layout(c));

  // This step's cache entries: normalised latent, then the RoPE'd shared key.
  std::vector<float> kv(T * d_entry);
  cpu::linear(x, w.kv_a.weight, w.kv_a.bias, kv.data(), T, d_entry, H);
  for (int64_t t = 0; t < T; ++t) cpu::rms_norm(kv.data() + t * d_entry, w.kv_a_norm, kv.data() + t * d_entry, 1, d_latent, c.rms_norm_eps);
  cpu::rope(kv.data() + d_latent, T, d_entry, d_rope, cos, sin, 1, rope_layout(c));
  {
    int64_t row = 0;
    for (const SequenceChunk& seq : batch.sequences)
      for (int64_t i = 0; i < seq.num_new; ++i, ++row)
        std::copy_n(kv.data() + row * d_entry, d_entry, cache.entry(layer_idx, seq.block_table, positions[row]));
  }

  std::vector<float> attn(T * heads * d_v);
  if (use_absorbed(batch)) {
    // Absorbed: each head's query folded into the latent space (W_uk^T q_nope | q_pe), attention over the paged
    // latent entries, then W_uv back out of it. Row r sees positions [0, its own].
    std::vector<float> q_abs(T * heads * d_entry), o_latent(T * heads * d_latent);
    for (int64_t r = 0; r < T; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float* q_nope = q.data() + (r * heads + h) * d_qk;
        const float* w_uk = w.kv_b.weight + h * (d_nope + d_v) * d_latent;  // kv_b rows: d_nope of W_uk, d_v of W_uv
        float* qa = q_abs.data() + (r * heads + h) * d_entry;
        std::fill_n(qa, d_latent, 0.0f);
        for (int64_t n = 0; n < d_nope; ++n) cpu::axpy(q_nope[n], w_uk + n * d_latent, qa, d_latent);
        std::copy_n(q_nope + d_nope, d_rope, qa + d_latent);
      }
    int64_t max_blocks = 1;
    for (const SequenceChunk& seq : batch.sequences)
      max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seq.block_table.size()));
    std::vector<int32_t> tables(T * max_blocks, 0), lens(T);
    int64_t row = 0;
    for (const SequenceChunk& seq : batch.sequences)
      for (int64_t i = 0; i < seq.num_new; ++i, ++row) {
        std::copy(seq.block_table.begin(), seq.block_table.end(), tables.begin() + row * max_blocks);
        lens[row] = static_cast<int32_t>(seq.num_cached + i + 1);
      }
    cpu::mla_decode_attention(q_abs.data(), cache.layer_entries(layer_idx), tables.data(), max_blocks, lens.data(), T,
                              heads, d_latent, d_rope, scale, o_latent.data());
    for (int64_t r = 0; r < T; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float* w_uv = w.kv_b.weight + (h * (d_nope + d_v) + d_nope) * d_latent;
        const float* ol = o_latent.data() + (r * heads + h) * d_latent;
        for (int64_t v = 0; v < d_v; ++v) {
          float s = 0.0f;
          for (int64_t k = 0; k < d_latent; ++k) s += w_uv[v * d_latent + k] * ol[k];
          attn[(r * heads + h) * d_v + v] = s;
        }
      }
  } else {
    // Expanded: per sequence, the latents decompressed into per-head keys and values once for all the chunk's
    // queries, then causal attention over them.
    int64_t first_row = 0;
    for (const SequenceChunk& seq : batch.sequences) {
      const int64_t context = seq.num_cached + seq.num_new;
      std::vector<float> entries(context * d_entry), latents(context * d_latent);
      for (int64_t j = 0; j < context; ++j) {
        std::copy_n(cache.entry(layer_idx, seq.block_table, j), d_entry, entries.data() + j * d_entry);
        std::copy_n(entries.data() + j * d_entry, d_latent, latents.data() + j * d_latent);
      }
      std::vector<float> kv_expanded(context * heads * (d_nope + d_v));  // [context, heads, d_nope + d_v]
      cpu::linear(latents.data(), w.kv_b.weight, nullptr, kv_expanded.data(), context, heads * (d_nope + d_v), d_latent);
      const std::vector<int32_t> q_seq(seq.num_new, 0), cu_k = {0, static_cast<int32_t>(context)};
      std::vector<int32_t> q_pos(seq.num_new);
      for (int64_t i = 0; i < seq.num_new; ++i) q_pos[i] = static_cast<int32_t>(seq.num_cached + i);
      cpu::mla_prefill_attention(q.data() + first_row * heads * d_qk, kv_expanded.data(), entries.data() + d_latent,
                                 d_entry, q_seq.data(), q_pos.data(), cu_k.data(), seq.num_new, heads, d_nope, d_rope,
                                 d_v, scale, attn.data() + first_row * heads * d_v);
      first_row += seq.num_new;
    }
  }
  cpu::linear(attn.data(), w.o.weight, w.o.bias, out, T, H, heads * d_v);
}

}  // namespace deepinfer
