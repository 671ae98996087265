// Op-table rows: MLA attention — the fused prepare step (norm, RoPE, cache write, absorb) against its parts,
// the absorbed paged decode (split-KV, with W_uv folded in) and the causal varlen prefill.
#include <algorithm>
#include <numeric>
#include <tuple>

#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_decode_seesaw.cuh"
#include "kernels/cuda/mla_decode_wgmma.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/mla_prefill_tma.cuh"
#include "kernels/cuda/mla_prepare.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"

#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

// The fused step between MLA's projections and its attention against the five ops it replaces (each a row of
// its own): bit-identical cache entries, rotated queries and absorbed-query tails; and the same with the absorb
// (batched_gemv_transposed) in its launch.
void mla_prepare(OpRun& r) {
  const int64_t tokens = r["tokens"], heads = r["heads"], lora = r["lora"], rope_dim = r["rope"], nope = r["nope"];
  const bool interleaved = r["interleaved"] != 0;
  const int64_t entry = lora + rope_dim, qk = nope + rope_dim, num_slots = 40, v_dim = 128;
  std::vector<float> inv_freq(rope_dim / 2), unused;
  for (int64_t i = 0; i < rope_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rope_dim);
  auto d_inv = DeviceArray<float>::from_host(inv_freq);
  std::vector<int32_t> positions(tokens);
  std::vector<int64_t> slots(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    positions[t] = static_cast<int32_t>(r.rng()() % 4000), slots[t] = (t * 11 + 3) % num_slots;
  auto d_pos = DeviceArray<int32_t>::from_host(positions);
  auto d_slots = DeviceArray<int64_t>::from_host(slots);
  const std::vector<Bf16> kv_bits = r.random_bf16(tokens * entry, unused);
  const std::vector<Bf16> q_bits = r.random_bf16(tokens * heads * qk, unused);
  auto weight = DeviceArray<Bf16>::from_host(r.random_bf16(lora, unused));
  auto kv_b = DeviceArray<Bf16>::from_host(r.random_bf16(heads * (nope + v_dim) * lora, unused, 0.05f));
  // The parts: normalise the latent in place, rotate k_pe and q_pe, write the entries, copy the q tails.
  auto kv = DeviceArray<Bf16>::from_host(kv_bits), q = DeviceArray<Bf16>::from_host(q_bits);
  DeviceArray<Bf16> cache(num_slots * entry), q_latent(tokens * heads * entry);
  cache.poison();
  q_latent.poison();
  cuda::rms_norm(bf(kv), entry, bf(weight), bf(kv), entry, tokens, lora, 1e-6f, nullptr);
  cuda::rope(bf(kv) + lora, tokens, entry, rope_dim, d_pos.data(), 1, d_inv.data(), 1.2f, interleaved, nullptr);
  cuda::rope(bf(q) + nope, tokens * heads, qk, rope_dim, d_pos.data(), heads, d_inv.data(), 1.2f, interleaved, nullptr);
  cuda::write_kv_entries(bf(kv), entry, d_slots.data(), tokens, entry, bf(cache), entry, nullptr);
  DI_CUDA_CHECK(cudaMemcpy2DAsync(bf(q_latent) + lora, entry * sizeof(Bf16), bf(q) + nope, qk * sizeof(Bf16),
                                  rope_dim * sizeof(Bf16), tokens * heads, cudaMemcpyDeviceToDevice,
                                  cudaStreamPerThread));
  // Fused, on the decode layout: each token's q row and kv row side by side in one row of heads * qk + entry.
  const int64_t row = heads * qk + entry;
  std::vector<Bf16> packed(tokens * row);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(q_bits.begin() + t * heads * qk, heads * qk, packed.begin() + t * row);
    std::copy_n(kv_bits.begin() + t * entry, entry, packed.begin() + t * row + heads * qk);
  }
  auto qkv = DeviceArray<Bf16>::from_host(packed);
  DeviceArray<Bf16> cache2(num_slots * entry), q_latent2(tokens * heads * entry);
  cache2.poison();
  q_latent2.poison();
  const cuda::MlaPrepareShape shape{tokens, heads, lora, rope_dim, nope, row, row};
  cuda::mla_prepare(bf(qkv) + heads * qk, bf(weight), 1e-6f, bf(qkv), d_pos.data(), d_inv.data(), 1.2f, interleaved,
                    d_slots.data(), bf(cache2), bf(q_latent2), shape, nullptr);
  // With W_uk's absorb in the same launch against the same two launched apart: every bit of the cache, q and
  // q_latent (q_nope is only read, so the absorb may run after the prepare here).
  auto qkv3 = DeviceArray<Bf16>::from_host(packed);
  DeviceArray<Bf16> cache3(num_slots * entry), q_latent3(tokens * heads * entry);
  cache3.poison();
  q_latent3.poison();
  cuda::batched_gemv_transposed(bf(qkv), bf(kv_b), bf(q_latent2), heads, tokens, lora, nope,
                                {row, qk, (nope + v_dim) * lora, heads * entry, entry, lora}, nullptr);
  cuda::mla_prepare_absorb(bf(qkv3) + heads * qk, bf(weight), 1e-6f, bf(qkv3), d_pos.data(), d_inv.data(), 1.2f,
                           interleaved, d_slots.data(), bf(cache3), bf(q_latent3), shape, bf(kv_b),
                           (nope + v_dim) * lora, nullptr);
  sync();
  r.exact("q and kv rows, with and without the absorb", qkv3.to_host(), qkv.to_host());
  r.exact("q_latent, with the absorb against prepare + batched_gemv_transposed", q_latent3.to_host(),
          q_latent2.to_host());
  const std::vector<Bf16> c1 = cache.to_host(), c2 = cache2.to_host(), c3 = cache3.to_host();
  const std::vector<Bf16> l1 = q_latent.to_host(), l2 = q_latent2.to_host();
  std::vector<Bf16> written1, written2, written3, tails1, tails2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < entry; ++i) {
      written1.push_back(c1[slots[t] * entry + i]);
      written2.push_back(c2[slots[t] * entry + i]);
      written3.push_back(c3[slots[t] * entry + i]);
    }
  r.exact("cache entries against the parts", written2, written1);
  r.exact("cache entries with the absorb", written3, written2);
  const std::vector<Bf16> q1 = q.to_host(), after = qkv.to_host();
  std::vector<Bf16> q_parts, q_fused, kv_after, kv_before;
  for (int64_t t = 0; t < tokens; ++t) {
    q_parts.insert(q_parts.end(), q1.begin() + t * heads * qk, q1.begin() + (t + 1) * heads * qk);
    q_fused.insert(q_fused.end(), after.begin() + t * row, after.begin() + t * row + heads * qk);
    kv_before.insert(kv_before.end(), kv_bits.begin() + t * entry, kv_bits.begin() + (t + 1) * entry);
    kv_after.insert(kv_after.end(), after.begin() + t * row + heads * qk, after.begin() + (t + 1) * row);
  }
  r.exact("rotated queries against the parts", q_fused, q_parts);
  r.exact("kv rows, only read", kv_after, kv_before);
  for (int64_t i = 0; i < tokens * heads; ++i) {
    tails1.insert(tails1.end(), l1.begin() + i * entry + lora, l1.begin() + (i + 1) * entry);
    tails2.insert(tails2.end(), l2.begin() + i * entry + lora, l2.begin() + (i + 1) * entry);
  }
  r.exact("query tails against the parts", tails2, tails1);
}

// A paged latent cache shared by the decode rows: lengths across block edges (1, 63, 64, 65, 300, 511, 17),
// blocks shuffled; 16 heads (V2-Lite) or the row's "heads" (128: V3, the warpgroup-MMA kernel).
struct DecodeInputs {
  static constexpr int64_t kLatent = 512, kRope = 64, kBlocks = 40, kMaxBlocks = 8;
  int64_t heads = 16;
  std::vector<int32_t> lens = {1, 63, 64, 65, 300, 511, 17}, table;
  std::vector<float> q_f, cache_f;
  DeviceArray<Bf16> q, cache;
  DeviceArray<int32_t> d_table, d_lens;
  float scale = 0.07f;
  explicit DecodeInputs(OpRun& r, int64_t num_heads = 16) : heads(num_heads) {
    const auto batch = static_cast<int64_t>(lens.size());
    const int64_t dim = kLatent + kRope;
    q = DeviceArray<Bf16>::from_host(r.random_bf16(batch * heads * dim, q_f, 0.1f));
    cache = DeviceArray<Bf16>::from_host(r.random_bf16(kBlocks * 64 * dim, cache_f));
    std::vector<int32_t> blocks(kBlocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), r.rng());
    table.resize(batch * kMaxBlocks);
    for (int64_t i = 0; i < batch * kMaxBlocks; ++i) table[i] = blocks[i % kBlocks];
    d_table = DeviceArray<int32_t>::from_host(table);
    d_lens = DeviceArray<int32_t>::from_host(lens);
  }
  std::vector<float> cpu_attention(int64_t rows) const {
    std::vector<float> out(rows * heads * kLatent);
    cpu::mla_decode_attention(q_f.data(), cache_f.data(), table.data(), kMaxBlocks, lens.data(), rows, heads, kLatent,
                              kRope, scale, out.data());
    return out;
  }
};

// The kernel of a row's "kernel": 0 the mma.sync one, 1 the warpgroup-MMA one, 2 its alternate-tile form (seesaw),
// each asserted to take the shape (a fallback would pass in its place).
cuda::MlaDecodeKernel decode_kernel(OpRun& r, int64_t heads, int64_t keys_per_split = 0) {
  const auto kernel = static_cast<cuda::MlaDecodeKernel>(r["kernel"]);
  if (kernel == cuda::MlaDecodeKernel::kWgmma) {
    EXPECT_TRUE(cuda::mla_decode_wgmma_supports(heads, DecodeInputs::kLatent, DecodeInputs::kRope));
  }
  if (kernel == cuda::MlaDecodeKernel::kSeesaw) {
    EXPECT_TRUE(cuda::mla_decode_seesaw_supports(heads, DecodeInputs::kLatent, DecodeInputs::kRope, keys_per_split));
  }
  return kernel;
}

// All seven sequences or the first three (up to four the kernel loads its first tiles before the wait), split
// 1, 4 or 16 ways; at 64 or 128 heads on either warpgroup-MMA kernel or the mma.sync one ("kernel").
void mla_decode_attention(OpRun& r) {
  DecodeInputs in(r, r["heads"]);
  const int64_t rows = r["rows"], splits = r["splits"], H = in.heads, L = DecodeInputs::kLatent;
  const cuda::MlaDecodeKernel kernel = decode_kernel(r, H);
  DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(rows, H, L, splits) / sizeof(float));
  DeviceArray<Bf16> out(rows * H * L);
  out.poison();
  cuda::mla_decode_attention(bf(in.q), bf(in.cache), in.d_table.data(), DecodeInputs::kMaxBlocks, in.d_lens.data(),
                             rows, H, L, DecodeInputs::kRope, in.scale, splits, workspace.data(), bf(out), nullptr, 0,
                             kernel);
  sync();
  r.close("latent outputs", to_float(out.to_host()), in.cpu_attention(rows));
}

// --batch-invariant's partition: chunks of keys_per_split keys from each sequence's first, the launch's split count
// only enough for the longest or far more (empty splits): against the CPU, and the two launches bit for bit.
void mla_decode_attention_fixed_chunks(OpRun& r) {
  DecodeInputs in(r, r["heads"]);
  const int64_t rows = 7, keys = r["keys_per_split"], H = in.heads, L = DecodeInputs::kLatent;
  const cuda::MlaDecodeKernel kernel = decode_kernel(r, H, keys);
  const int64_t enough = (511 + keys - 1) / keys, more = enough + r["extra_splits"];
  DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(rows, H, L, more) / sizeof(float));
  std::vector<std::vector<float>> outs;
  for (const int64_t splits : {enough, more}) {
    DeviceArray<Bf16> out(rows * H * L);
    out.poison();
    cuda::mla_decode_attention(bf(in.q), bf(in.cache), in.d_table.data(), DecodeInputs::kMaxBlocks, in.d_lens.data(),
                               rows, H, L, DecodeInputs::kRope, in.scale, splits, workspace.data(), bf(out), nullptr,
                               keys, kernel);
    sync();
    outs.push_back(to_float(out.to_host()));
  }
  r.close("latent outputs", outs[0], in.cpu_attention(rows));
  r.exact("the same with empty splits after", outs[1], outs[0]);
}

// With W_uv folded into the combine: 40 rows a head (a partial group of 32), heads 2 rows of padding apart in the
// weight; against the CPU attention rounded to bf16 (as the unfused path stores it), then W_uv.
void mla_decode_attention_projected(OpRun& r) {
  DecodeInputs in(r);
  const int64_t splits = r["splits"], H = in.heads, L = DecodeInputs::kLatent;
  const auto batch = static_cast<int64_t>(in.lens.size());
  const int64_t rows = 40, head_stride = (rows + 2) * L;
  ASSERT_TRUE(cuda::mla_decode_projected_supports(L, DecodeInputs::kRope, splits));
  std::vector<float> w_f;
  auto w_uv = DeviceArray<Bf16>::from_host(r.random_bf16(H * head_stride, w_f, 0.05f));
  DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(batch, H, L, splits) / sizeof(float));
  DeviceArray<Bf16> attn(batch * H * rows);
  attn.poison();
  cuda::mla_decode_attention_projected(bf(in.q), bf(in.cache), in.d_table.data(), DecodeInputs::kMaxBlocks,
                                       in.d_lens.data(), batch, H, L, DecodeInputs::kRope, in.scale, splits,
                                       workspace.data(), {bf(w_uv), rows, head_stride}, bf(attn), nullptr);
  sync();
  const std::vector<float> o = round_bf16(in.cpu_attention(batch));
  std::vector<float> want(batch * H * rows);
  cpu::batched_gemv(o.data(), w_f.data(), want.data(), H, batch, rows, L, {H * L, L, head_stride, H * rows, rows, L});
  r.close("projected outputs", to_float(attn.to_host()), want);
}

// Three sequences: 30 new tokens after 20 cached, 45 from scratch, and 70 after 90 cached (keys span several 64-key
// tiles of the tensor-core kernels; its rows two 64-row tiles, with partial and idle warps); "long": 200 after 100
// and 329 from scratch, then (a last tile of 20 rows: the 128-row kernel's second half past the queries) 20 after 5.
// "kernel": 0 the mma.sync kernel where a warpgroup-MMA one would take the shape, 1 the warpgroup-MMA kernel of
// 64-row tiles, 2 the one of 128-row tiles and TMA-fed stages (each on its own tiles). "model_pe": k_pe as the model
// passes it, columns 512-575 of 576-wide latent rows, instead of rows of its own.
void mla_prefill_attention(OpRun& r) {
  const int64_t heads = r["heads"], nope = r["nope"], rope = r["rope"], v_dim = r["v"];
  const bool long_rows = r["long"] != 0;
  const std::vector<int64_t> cached = long_rows ? std::vector<int64_t>{100, 0, 5} : std::vector<int64_t>{20, 0, 90};
  const std::vector<int64_t> fresh = long_rows ? std::vector<int64_t>{200, 329, 20} : std::vector<int64_t>{30, 45, 70};
  std::vector<int32_t> q_seq, q_pos, cu_k = {0};
  for (size_t s = 0; s < cached.size(); ++s) {
    for (int64_t i = 0; i < fresh[s]; ++i) {
      q_seq.push_back(static_cast<int32_t>(s));
      q_pos.push_back(static_cast<int32_t>(cached[s] + i));
    }
    cu_k.push_back(static_cast<int32_t>(cu_k.back() + cached[s] + fresh[s]));
  }
  const auto tq = static_cast<int64_t>(q_seq.size());
  const int64_t tk = cu_k.back();
  std::vector<float> q_f, kv_f, pe_f;
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(tq * heads * (nope + rope), q_f, 0.2f));
  auto kv = DeviceArray<Bf16>::from_host(r.random_bf16(tk * heads * (nope + v_dim), kv_f));
  // k_pe's rows pe_stride apart from pe_offset: their own, or the tail of 576-wide rows as the model's latents have it.
  const int64_t pe_stride = r["model_pe"] != 0 ? 576 : rope, pe_offset = pe_stride - rope;
  auto pe = DeviceArray<Bf16>::from_host(r.random_bf16(tk * pe_stride, pe_f));
  auto d_seq = DeviceArray<int32_t>::from_host(q_seq);
  auto d_pos = DeviceArray<int32_t>::from_host(q_pos);
  auto d_cu = DeviceArray<int32_t>::from_host(cu_k);
  DeviceArray<Bf16> out(tq * heads * v_dim);
  out.poison();
  const float scale = 0.072f;
  const auto kernel = static_cast<cuda::MlaPrefillKernel>(r["kernel"]);
  if (kernel == cuda::MlaPrefillKernel::kTma) {
    ASSERT_TRUE(cuda::mla_prefill_tma_supports(nope, rope, v_dim));
  }
  const std::vector<int32_t> tiles = cuda::mla_prefill_tiles(q_seq, nope, rope, v_dim, kernel);
  auto d_tiles = DeviceArray<int32_t>::from_host(tiles);
  ASSERT_TRUE(cuda::mla_prefill_attention(bf(q), bf(kv), bf(pe) + pe_offset, pe_stride, d_seq.data(), d_pos.data(),
                                          d_cu.data(), d_tiles.data(), static_cast<int64_t>(tiles.size()) - 1, heads,
                                          nope, rope, v_dim, scale, bf(out), nullptr, kernel, tq, tk));
  sync();
  std::vector<float> want(tq * heads * v_dim);
  cpu::mla_prefill_attention(q_f.data(), kv_f.data(), pe_f.data() + pe_offset, pe_stride, q_seq.data(), q_pos.data(),
                             cu_k.data(), tq, heads, nope, rope, v_dim, scale, want.data());
  r.close("outputs", to_float(out.to_host()), want);
}

}  // namespace

void add_attention_rows(OpTable& t) {
  for (int64_t interleaved : {1, 0})
    t.add("mla_prepare", "bf16",
          {{"tokens", 7}, {"heads", 16}, {"lora", 512}, {"rope", 64}, {"nope", 128}, {"interleaved", interleaved}},
          kExact, mla_prepare);
  for (int64_t rows : {7, 3})
    for (int64_t splits : {1, 4, 16})
      t.add("mla_decode_attention", "bf16", {{"heads", 16}, {"kernel", 0}, {"rows", rows}, {"splits", splits}}, kBf16,
            mla_decode_attention);
  for (auto [heads, kernel] : {std::pair<int64_t, int64_t>{128, 1}, {64, 1}, {128, 2}, {64, 2}, {128, 0}})
    for (int64_t splits : {1, 4, 16})
      t.add("mla_decode_attention", "bf16", {{"heads", heads}, {"kernel", kernel}, {"rows", 7}, {"splits", splits}},
            kBf16, mla_decode_attention);
  for (auto [heads, kernel] : {std::pair<int64_t, int64_t>{16, 0}, {128, 1}})
    for (auto [keys, extra] : {std::pair<int64_t, int64_t>{64, 30}, {256, 1}, {32, 200}})
      t.add("mla_decode_attention_fixed_chunks", "bf16",
            {{"heads", heads}, {"kernel", kernel}, {"keys_per_split", keys}, {"extra_splits", extra}}, kBf16,
            mla_decode_attention_fixed_chunks);
  for (auto [keys, extra] : {std::pair<int64_t, int64_t>{64, 30}, {256, 1}})  // the seesaw: whole blocks a split
    t.add("mla_decode_attention_fixed_chunks", "bf16",
          {{"heads", 128}, {"kernel", 2}, {"keys_per_split", keys}, {"extra_splits", extra}}, kBf16,
          mla_decode_attention_fixed_chunks);
  for (int64_t splits : {2, 16, 64})
    t.add("mla_decode_attention_projected", "bf16", {{"splits", splits}}, kBf16, mla_decode_attention_projected);
  for (auto [kernel, long_rows, model_pe] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 0, 0}, {1, 1, 1}, {2, 0, 0}, {2, 1, 0}, {2, 1, 1}, {0, 0, 0}})
    t.add("mla_prefill_attention", "bf16",
          {{"heads", 8}, {"nope", 128}, {"rope", 64}, {"v", 128}, {"kernel", kernel}, {"long", long_rows},
           {"model_pe", model_pe}},
          kBf16, mla_prefill_attention);
}

}  // namespace deepinfer::op_test
