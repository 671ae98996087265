// Multi-head latent attention over the paged latent cache, in its two forms (see AttentionPath).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"
#include "src/model/deepseek_model.h"

namespace deepinfer {

namespace {

cpu::RopeLayout rope_layout(const ModelConfig& c) {
  return c.rope.interleaved ? cpu::RopeLayout::kInterleaved : cpu::RopeLayout::kHalf;
}

bool use_absorbed(const ForwardBatch& batch) {
  if (batch.attention_path != AttentionPath::kAuto) return batch.attention_path == AttentionPath::kAbsorbed;
  return std::all_of(batch.sequences.begin(), batch.sequences.end(),
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
    cpu::linear(x, w.q_a, w.q_a_bias, q_latent.data(), T, c.q_lora_rank, H);
    cpu::rms_norm(q_latent.data(), w.q_a_norm, q_latent.data(), T, c.q_lora_rank, c.rms_norm_eps);
    cpu::linear(q_latent.data(), w.q_b, nullptr, q.data(), T, heads * d_qk, c.q_lora_rank);
  } else {
    cpu::linear(x, w.q, nullptr, q.data(), T, heads * d_qk, H);
  }
  cpu::rope(q.data() + d_nope, T * heads, d_qk, d_rope, cos, sin, heads, rope_layout(c));

  // This step's cache entries: normalised latent, then the RoPE'd shared key.
  std::vector<float> kv(T * d_entry);
  cpu::linear(x, w.kv_a, w.kv_a_bias, kv.data(), T, d_entry, H);
  for (int64_t t = 0; t < T; ++t) cpu::rms_norm(kv.data() + t * d_entry, w.kv_a_norm, kv.data() + t * d_entry, 1, d_latent, c.rms_norm_eps);
  cpu::rope(kv.data() + d_latent, T, d_entry, d_rope, cos, sin, 1, rope_layout(c));
  {
    int64_t row = 0;
    for (const SequenceChunk& seq : batch.sequences)
      for (int64_t i = 0; i < seq.num_new; ++i, ++row)
        std::copy_n(kv.data() + row * d_entry, d_entry, cache.entry(layer_idx, seq.block_table, positions[row]));
  }

  std::vector<float> attn(T * heads * d_v);
  const bool absorbed = use_absorbed(batch);
  int64_t first_row = 0;
  for (const SequenceChunk& seq : batch.sequences) {
    const int64_t context = seq.num_cached + seq.num_new;
    // The sequence's whole cache, gathered contiguous [context, d_entry].
    std::vector<float> entries(context * d_entry);
    for (int64_t j = 0; j < context; ++j)
      std::copy_n(cache.entry(layer_idx, seq.block_table, j), d_entry, entries.data() + j * d_entry);

    std::vector<float> kv_expanded;  // [context, heads, d_nope + d_v]
    if (!absorbed) {
      // Decompress latents into per-head keys and values, once for all the chunk's queries.
      std::vector<float> latents(context * d_latent);
      for (int64_t j = 0; j < context; ++j)
        std::copy_n(entries.data() + j * d_entry, d_latent, latents.data() + j * d_latent);
      kv_expanded.resize(context * heads * (d_nope + d_v));
      cpu::linear(latents.data(), w.kv_b, nullptr, kv_expanded.data(), context, heads * (d_nope + d_v), d_latent);
    }

#pragma omp parallel for collapse(2) schedule(static) if (seq.num_new * heads * context > 4096)
    for (int64_t i = 0; i < seq.num_new; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = first_row + i;
        const int64_t visible = seq.num_cached + i + 1;  // causal: positions [0, own position]
        const float* q_nope = q.data() + (row * heads + h) * d_qk;
        const float* q_pe = q_nope + d_nope;
        float* o = attn.data() + (row * heads + h) * d_v;
        std::vector<float> scores(visible);
        // Rows of kv_b for this head: d_nope rows of W_uk (latent -> key), then d_v rows of W_uv (latent -> value).
        const float* w_uk = w.kv_b + h * (d_nope + d_v) * d_latent;
        const float* w_uv = w_uk + d_nope * d_latent;
        if (absorbed) {
          std::vector<float> q_latent(d_latent, 0.0f), o_latent(d_latent, 0.0f);
          for (int64_t n = 0; n < d_nope; ++n) cpu::axpy(q_nope[n], w_uk + n * d_latent, q_latent.data(), d_latent);
          for (int64_t j = 0; j < visible; ++j) {
            const float* e = entries.data() + j * d_entry;
            float s = 0.0f;
            for (int64_t k = 0; k < d_latent; ++k) s += q_latent[k] * e[k];
            for (int64_t k = 0; k < d_rope; ++k) s += q_pe[k] * e[d_latent + k];
            scores[j] = s * scale;
          }
          cpu::softmax(scores.data(), visible);
          for (int64_t j = 0; j < visible; ++j) cpu::axpy(scores[j], entries.data() + j * d_entry, o_latent.data(), d_latent);
          for (int64_t v = 0; v < d_v; ++v) {
            float s = 0.0f;
            for (int64_t k = 0; k < d_latent; ++k) s += w_uv[v * d_latent + k] * o_latent[k];
            o[v] = s;
          }
        } else {
          for (int64_t j = 0; j < visible; ++j) {
            const float* k_nope = kv_expanded.data() + (j * heads + h) * (d_nope + d_v);
            const float* k_pe = entries.data() + j * d_entry + d_latent;
            float s = 0.0f;
            for (int64_t k = 0; k < d_nope; ++k) s += q_nope[k] * k_nope[k];
            for (int64_t k = 0; k < d_rope; ++k) s += q_pe[k] * k_pe[k];
            scores[j] = s * scale;
          }
          cpu::softmax(scores.data(), visible);
          std::fill_n(o, d_v, 0.0f);
          for (int64_t j = 0; j < visible; ++j)
            cpu::axpy(scores[j], kv_expanded.data() + (j * heads + h) * (d_nope + d_v) + d_nope, o, d_v);
        }
      }
    }
    first_row += seq.num_new;
  }
  cpu::linear(attn.data(), w.o, w.o_bias, out, T, H, heads * d_v);
}

}  // namespace deepinfer
