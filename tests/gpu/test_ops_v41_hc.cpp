// Op-table rows: DeepSeek-V4.1's hyper-connections (the flat RMS norm, the mixes with their Sinkhorn iterations, the
// collapse, post and embed, one launch a site) and the engram block's gate, each against its CPU form.
#include <algorithm>
#include <numeric>

#include "kernels/cpu/engram.h"
#include "kernels/cpu/hyper_connections.h"
#include "kernels/cuda/engram.cuh"
#include "kernels/cuda/hyper_connections.cuh"

#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

// DeepSeek-V4.1's hyper-connections (hc streams of `hidden` values a token, fp32 on the device).
void hc_flat_rms_norm(OpRun& r) {
  const int64_t tokens = r["tokens"], d = r["hc"] * r["hidden"];
  std::vector<float> streams(tokens * d);
  std::normal_distribution<float> normal;
  for (float& v : streams) v = normal(r.rng());
  auto d_streams = DeviceArray<float>::from_host(streams);
  DeviceArray<Bf16> flat(tokens * d);
  flat.poison();
  cuda::hc_flat_rms_norm(d_streams.data(), tokens, d, 1e-6f, bf(flat), nullptr);
  sync();
  std::vector<float> want(tokens * d);
  cpu::hc_flat_rms_norm(streams.data(), tokens, d, 1e-6f, want.data());
  r.close("normalised streams", to_float(flat.to_host()), want);
}

void hc_mixes(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], iters = r["sinkhorn_iters"], M = (2 + hc) * hc;
  std::normal_distribution<float> normal;
  std::vector<float> mixes(tokens * M), base(M), scale(3);
  for (float& v : mixes) v = normal(r.rng());
  for (float& v : base) v = 0.5f * normal(r.rng());
  for (float& v : scale) v = 0.5f + std::abs(normal(r.rng()));
  auto d_mixes = DeviceArray<float>::from_host(mixes), d_base = DeviceArray<float>::from_host(base);
  auto d_scale = DeviceArray<float>::from_host(scale);
  DeviceArray<float> pre(tokens * hc), post(tokens * hc), comb(tokens * hc * hc);
  pre.poison();
  post.poison();
  comb.poison();
  cuda::hc_mixes(d_mixes.data(), d_base.data(), d_scale.data(), tokens, hc, 1e-6f, iters, pre.data(), post.data(),
                 comb.data(), nullptr);
  sync();
  std::vector<float> want_pre(tokens * hc), want_post(tokens * hc), want_comb(tokens * hc * hc);
  cpu::hc_mixes(mixes.data(), base.data(), scale.data(), tokens, hc, 1e-6f, iters, want_pre.data(), want_post.data(),
                want_comb.data());
  r.close("pre", pre.to_host(), want_pre);
  r.close("post", post.to_host(), want_post);
  r.close("comb", comb.to_host(), want_comb);
}

void hc_collapse_rms_norm(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], hidden = r["hidden"];
  std::normal_distribution<float> normal;
  std::vector<float> streams(tokens * hc * hidden), pre(tokens * hc), w_f;
  for (float& v : streams) v = normal(r.rng());
  for (float& v : pre) v = std::uniform_real_distribution<float>(0.0f, 1.0f)(r.rng());
  auto weight = DeviceArray<Bf16>::from_host(r.random_bf16(hidden, w_f));
  auto d_streams = DeviceArray<float>::from_host(streams), d_pre = DeviceArray<float>::from_host(pre);
  DeviceArray<Bf16> h(tokens * hidden);
  h.poison();
  cuda::hc_collapse_rms_norm(d_streams.data(), d_pre.data(), bf(weight), tokens, hc, hidden, 1e-6f, bf(h), nullptr);
  sync();
  std::vector<float> want(tokens * hidden);
  cpu::hc_collapse_rms_norm(streams.data(), pre.data(), w_f.data(), tokens, hc, hidden, 1e-6f, want.data());
  r.close("sublayer inputs", to_float(h.to_host()), want);
}

// One site in one launch (hc_post of the previous sublayer first where "post_in") against the CPU chain. The CPU
// chain does not round the flat streams to bf16 and neither does the launch, so every output is held at fp32's
// bound (h against the CPU's rounded to bf16); a second launch on the same inputs must give the same bits (graphs
// replay what eager steps run).
void hc_site(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], hidden = r["hidden"], iters = r["sinkhorn_iters"];
  const int64_t D = hc * hidden, M = (2 + hc) * hc;
  const bool post_in = r["post_in"] != 0;
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> streams(tokens * D), pre(tokens * hc), base(M), scale(3), post(tokens * hc),
      comb(tokens * hc * hc);
  for (float& v : streams) v = normal(r.rng());
  for (float& v : pre) v = unit(r.rng());
  for (float& v : base) v = 0.5f * normal(r.rng());
  for (float& v : scale) v = 0.5f + std::abs(normal(r.rng()));
  for (float& v : post) v = 2.0f * unit(r.rng());
  for (float& v : comb) v = unit(r.rng()) / static_cast<float>(hc);
  std::vector<float> fn_f, norm_f, out_f;
  const auto fn = DeviceArray<Bf16>::from_host(r.random_bf16(M * D, fn_f, 1.0f / std::sqrt(static_cast<float>(D))));
  const auto norm = DeviceArray<Bf16>::from_host(r.random_bf16(hidden, norm_f));
  const auto out = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, out_f));
  const auto d_pre = DeviceArray<float>::from_host(pre), d_base = DeviceArray<float>::from_host(base);
  const auto d_scale = DeviceArray<float>::from_host(scale);
  struct Outputs {
    std::vector<float> streams, next_pre, post, comb;
    std::vector<Bf16> h;
  };
  const auto launch = [&] {
    auto d_streams = DeviceArray<float>::from_host(streams);
    auto d_post = DeviceArray<float>::from_host(post), d_comb = DeviceArray<float>::from_host(comb);
    if (!post_in) {
      d_post.poison();
      d_comb.poison();
    }
    DeviceArray<float> next_pre(tokens * hc);
    DeviceArray<Bf16> h(tokens * hidden);
    next_pre.poison();
    h.poison();
    cuda::hc_site(d_streams.data(), post_in ? bf(out) : nullptr, d_pre.data(),
                  {bf(fn), d_base.data(), d_scale.data(), bf(norm)}, tokens, hc, hidden, 1e-6f, 1e-6f, iters,
                  next_pre.data(), d_post.data(), d_comb.data(), bf(h), nullptr);
    sync();
    return Outputs{d_streams.to_host(), next_pre.to_host(), d_post.to_host(), d_comb.to_host(), h.to_host()};
  };
  const Outputs got = launch(), again = launch();
  std::vector<float> want_next_pre(tokens * hc), want_h(tokens * hidden);
  cpu::hc_site(streams.data(), post_in ? out_f.data() : nullptr, pre.data(), fn_f.data(), base.data(), scale.data(),
               norm_f.data(), tokens, hc, hidden, 1e-6f, 1e-6f, iters, want_next_pre.data(), post.data(), comb.data(),
               want_h.data());
  r.close("streams", got.streams, streams);
  r.close("next collapse weights", got.next_pre, want_next_pre);
  r.close("post", got.post, post);
  r.close("comb", got.comb, comb);
  r.close("sublayer inputs", to_float(got.h), round_bf16(want_h));
  r.exact("streams, second launch", again.streams, got.streams);
  r.exact("next collapse weights, second launch", again.next_pre, got.next_pre);
  r.exact("comb, second launch", again.comb, got.comb);
  r.exact("sublayer inputs, second launch", again.h, got.h);
}

// The plain collapse (DSpark's head) and, with no weights, the streams' mean (its target features), into rows of a
// wider array (the features of several target layers side by side).
void hc_collapse(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], hidden = r["hidden"], stride = hidden + r["padding"];
  std::normal_distribution<float> normal;
  std::vector<float> streams(tokens * hc * hidden), pre(tokens * hc);
  for (float& v : streams) v = normal(r.rng());
  for (float& v : pre) v = std::uniform_real_distribution<float>(0.0f, 1.0f)(r.rng());
  auto d_streams = DeviceArray<float>::from_host(streams), d_pre = DeviceArray<float>::from_host(pre);
  for (const bool mean : {false, true}) {
    DeviceArray<Bf16> out(tokens * stride);
    out.poison();
    cuda::hc_collapse(d_streams.data(), mean ? nullptr : d_pre.data(), tokens, hc, hidden, bf(out), stride, nullptr);
    sync();
    std::vector<float> want(tokens * hidden), got;
    cpu::hc_collapse(streams.data(), mean ? nullptr : pre.data(), tokens, hc, hidden, want.data());
    const std::vector<float> all = to_float(out.to_host());
    for (int64_t t = 0; t < tokens; ++t) got.insert(got.end(), all.begin() + t * stride, all.begin() + t * stride + hidden);
    r.close(mean ? "the streams' mean" : "collapsed", got, want);
  }
}

void hc_head_weights(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"];
  std::normal_distribution<float> normal;
  std::vector<float> mixes(tokens * hc), base(hc), scale = {0.5f + std::abs(normal(r.rng()))};
  for (float& v : mixes) v = normal(r.rng());
  for (float& v : base) v = normal(r.rng());
  auto d_mixes = DeviceArray<float>::from_host(mixes), d_base = DeviceArray<float>::from_host(base);
  auto d_scale = DeviceArray<float>::from_host(scale);
  DeviceArray<float> pre(tokens * hc);
  pre.poison();
  cuda::hc_head_weights(d_mixes.data(), d_base.data(), d_scale.data(), tokens, hc, 1e-6f, pre.data(), nullptr);
  sync();
  std::vector<float> want(tokens * hc);
  cpu::hc_head_weights(mixes.data(), base.data(), scale.data(), tokens, hc, 1e-6f, want.data());
  r.close("weights", pre.to_host(), want);
}

void hc_post(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], hidden = r["hidden"];
  std::normal_distribution<float> normal;
  std::vector<float> streams(tokens * hc * hidden), post(tokens * hc), comb(tokens * hc * hc), out_f;
  for (float& v : streams) v = normal(r.rng());
  for (float& v : post) v = 2.0f * std::uniform_real_distribution<float>(0.0f, 1.0f)(r.rng());
  for (float& v : comb) v = std::uniform_real_distribution<float>(0.0f, 0.5f)(r.rng());
  auto out = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, out_f));
  auto d_streams = DeviceArray<float>::from_host(streams), d_post = DeviceArray<float>::from_host(post);
  auto d_comb = DeviceArray<float>::from_host(comb);
  cuda::hc_post(d_streams.data(), bf(out), d_post.data(), d_comb.data(), tokens, hc, hidden, nullptr);
  sync();
  cpu::hc_post(streams.data(), out_f.data(), post.data(), comb.data(), tokens, hc, hidden);
  r.close("streams", d_streams.to_host(), streams);
}

// The engram block's gate: streams [T, hc, H] += gate(stream, key) * value, from kv [T, (hc + 1) * H].
void engram_mix(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], hidden = r["hidden"];
  std::normal_distribution<float> normal;
  std::vector<float> streams(tokens * hc * hidden), kv(tokens * (hc + 1) * hidden), q(hc * hidden), k(hc * hidden);
  for (float& v : streams) v = normal(r.rng());
  for (float& v : kv) v = normal(r.rng());
  for (float& v : q) v = 1.0f + 0.3f * normal(r.rng());
  for (float& v : k) v = 1.0f + 0.3f * normal(r.rng());
  auto d_streams = DeviceArray<float>::from_host(streams), d_kv = DeviceArray<float>::from_host(kv);
  auto d_q = DeviceArray<float>::from_host(q), d_k = DeviceArray<float>::from_host(k);
  cuda::engram_mix(d_streams.data(), d_kv.data(), d_q.data(), d_k.data(), tokens, hc, hidden, 1e-20f, nullptr);
  sync();
  cpu::engram_mix(streams.data(), kv.data(), q.data(), k.data(), tokens, hc, hidden, 1e-20f);
  r.close("streams", d_streams.to_host(), streams);
}

void hc_embed(OpRun& r) {
  const int64_t tokens = r["tokens"], hc = r["hc"], hidden = r["hidden"], vocab = 50;
  std::vector<float> table_f;
  auto table = DeviceArray<Bf16>::from_host(r.random_bf16(vocab * hidden, table_f));
  std::vector<int32_t> ids(tokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(r.rng()() % vocab);
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  DeviceArray<float> streams(tokens * hc * hidden), pre(tokens * hc);
  streams.poison();
  pre.poison();
  cuda::hc_embed(bf(table), d_ids.data(), tokens, hc, hidden, streams.data(), pre.data(), nullptr);
  sync();
  std::vector<float> want_streams(tokens * hc * hidden), want_pre(tokens * hc);
  cpu::hc_embed(table_f.data(), ids.data(), tokens, hc, hidden, want_streams.data(), want_pre.data());
  r.exact("streams", streams.to_host(), want_streams);
  r.exact("first collapse weights", pre.to_host(), want_pre);
}

}  // namespace

void add_v41_hc_rows(OpTable& t) {
  // V4.1-Flash's width (hc 4, hidden 5120) and an odd one; 1, 7 and 64 tokens.
  for (int64_t tokens : {1, 7, 64})
    for (int64_t hidden : {5120, 200}) {
      const Sizes s = {{"tokens", tokens}, {"hc", 4}, {"hidden", hidden}};
      t.add("hc_flat_rms_norm", "bf16", s, kBf16, hc_flat_rms_norm);
      t.add("hc_collapse_rms_norm", "bf16", s, kBf16, hc_collapse_rms_norm);
      t.add("hc_post", "f32", s, kF32, hc_post);
      t.add("hc_embed", "f32", s, kExact, hc_embed);
      t.add("engram_mix", "f32", s, kF32, engram_mix);
    }
  for (int64_t tokens : {1, 7, 300}) {
    t.add("hc_collapse", "bf16", {{"tokens", tokens}, {"hc", 4}, {"hidden", 4096}, {"padding", 8192}}, kBf16,
          hc_collapse);
    t.add("hc_head_weights", "f32", {{"tokens", tokens}, {"hc", 4}}, kF32, hc_head_weights);
  }
  t.add("hc_collapse", "bf16", {{"tokens", 5}, {"hc", 3}, {"hidden", 200}, {"padding", 0}}, kBf16, hc_collapse);
  // The site in one launch: V4.1-Flash's width and an odd one, decode and prefill-sized token counts (one cluster a
  // token up to 32, then groups of up to 8), with and without the previous sublayer's post; the other stream counts.
  for (int64_t tokens : {1, 7, 64, 300})
    for (int64_t hidden : {5120, 200})
      for (int64_t post_in : {0, 1})
        t.add("hc_site", "f32",
              {{"tokens", tokens}, {"hc", 4}, {"hidden", hidden}, {"sinkhorn_iters", 20}, {"post_in", post_in}}, kF32,
              hc_site);
  for (int64_t hc : {1, 2, 3})
    t.add("hc_site", "f32", {{"tokens", 7}, {"hc", hc}, {"hidden", 200}, {"sinkhorn_iters", 1}, {"post_in", 1}}, kF32,
          hc_site);
  for (int64_t iters : {1, 20})
    for (int64_t hc : {4, 2})
      t.add("hc_mixes", "f32", {{"tokens", 300}, {"hc", hc}, {"sinkhorn_iters", iters}}, kF32, hc_mixes);
}

}  // namespace deepinfer::op_test
