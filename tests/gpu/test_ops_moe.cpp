// Op-table rows: the MoE ops — routing (V2, V3, V4.1), permute / route / pad, the routed-expert kernels
// (matrix-vector, grouped, cuBLAS grouped and chunked GEMMs) and the unpermute fused with the next norm.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>

#include "kernels/cpu/fp4_weights.h"
#include "kernels/cpu/fp8_weights.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/router.h"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/moe_fp4.cuh"
#include "kernels/cuda/moe_fp4_gemm.cuh"
#include "kernels/cuda/moe_fp8.cuh"
#include "kernels/cuda/moe_gemv.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/moe_permute.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/router.cuh"

#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

// The decode step's last MoE kernel: moe_unpermute then add_rms_norm in one launch, the same bits as the two
// (hidden 7168: a partial last piece round; 200: fewer pieces than threads).
void moe_unpermute_add_rms_norm(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], hidden = r["hidden"];
  ASSERT_TRUE(cuda::moe_unpermute_norm_supports(top_k, hidden));
  const int64_t rows = tokens * top_k;
  std::vector<float> unused;
  auto y_perm = DeviceArray<Bf16>::from_host(r.random_bf16(rows * hidden, unused));
  auto base = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, unused));
  const std::vector<Bf16> residual_host = r.random_bf16(tokens * hidden, unused);
  auto norm_weight = DeviceArray<Bf16>::from_host(r.random_bf16(hidden, unused));
  std::vector<int32_t> row_of(rows);
  std::iota(row_of.begin(), row_of.end(), 0);
  std::shuffle(row_of.begin(), row_of.end(), r.rng());
  std::vector<float> weights(rows);
  for (float& w : weights) w = std::uniform_real_distribution<float>(0.1f, 1.0f)(r.rng());
  auto d_row_of = DeviceArray<int32_t>::from_host(row_of);
  auto d_weights = DeviceArray<float>::from_host(weights);

  auto delta = DeviceArray<Bf16>::from_host(base.to_host());
  auto residual_parts = DeviceArray<Bf16>::from_host(residual_host);
  DeviceArray<Bf16> normed_parts(tokens * hidden);
  cuda::moe_unpermute(bf(y_perm), d_row_of.data(), d_weights.data(), tokens, top_k, hidden, bf(delta), nullptr);
  cuda::add_rms_norm(bf(delta), bf(residual_parts), bf(norm_weight), bf(normed_parts), tokens, hidden, 1e-6f, nullptr);
  auto residual_fused = DeviceArray<Bf16>::from_host(residual_host);
  DeviceArray<Bf16> normed_fused(tokens * hidden);
  normed_fused.poison();
  cuda::moe_unpermute_add_rms_norm(bf(y_perm), d_row_of.data(), d_weights.data(), tokens, top_k, hidden, bf(base),
                                   bf(residual_fused), bf(norm_weight), 1e-6f, bf(normed_fused), nullptr);
  sync();
  r.exact("residual against the two ops", residual_fused.to_host(), residual_parts.to_host());
  r.exact("normalised against the two ops", normed_fused.to_host(), normed_parts.to_host());
}

void route_topk(OpRun& r) {
  // version 2: softmax, groups by their best expert; 3: sigmoid + bias, groups by their top two; 41: V4.1-Flash's
  // sqrt(softplus) over gate_temp + bias, 384 experts top-6, no groups.
  const int64_t tokens = r["tokens"], version = r["version"];
  const bool v3 = version == 3, v41 = version == 41;
  cpu::RouterParams p;
  p.num_experts = v41 ? 384 : v3 ? 256 : 64;
  p.top_k = v3 ? 8 : 6;
  p.num_groups = v41 ? 1 : v3 ? 8 : 4;
  p.topk_groups = v41 ? 1 : v3 ? 4 : 2;
  p.scoring = v41  ? cpu::RouterParams::Scoring::kSqrtSoftplus
              : v3 ? cpu::RouterParams::Scoring::kSigmoid
                   : cpu::RouterParams::Scoring::kSoftmax;
  p.group_score = v41  ? cpu::RouterParams::GroupScore::kNone
                  : v3 ? cpu::RouterParams::GroupScore::kTop2Sum
                       : cpu::RouterParams::GroupScore::kMax;
  p.normalize = v3 || v41;
  p.scaling = v41 ? 1.5f : v3 ? 2.5f : 1.0f;
  p.temperature = v41 ? 0.7f : 1.0f;
  std::normal_distribution<float> normal;
  std::vector<float> logits(tokens * p.num_experts), bias(p.num_experts);
  for (float& l : logits) l = normal(r.rng());
  for (float& b : bias) b = 0.1f * normal(r.rng());
  auto d_logits = DeviceArray<float>::from_host(logits);
  auto d_bias = DeviceArray<float>::from_host(bias);
  std::vector<int32_t> want_ids(tokens * p.top_k);
  std::vector<float> want_w(tokens * p.top_k), scratch(2 * p.num_experts + p.num_groups);
  if (v3 || v41) p.correction_bias = bias.data();
  cpu::route_topk(logits.data(), tokens, p, want_ids.data(), want_w.data(), scratch.data());
  if (v3 || v41) p.correction_bias = d_bias.data();
  DeviceArray<int32_t> ids(tokens * p.top_k);
  DeviceArray<float> w(tokens * p.top_k);
  ids.poison();
  w.poison();
  cuda::route_topk(d_logits.data(), tokens, p, ids.data(), w.data(), nullptr);
  sync();
  r.exact("expert ids", ids.to_host(), want_ids);
  r.close("combine weights", w.to_host(), want_w);
}

// Permute, cuBLAS's grouped GEMM up and down, unpermute: out[t] = base[t] + sum_k w * (W_e^T bf16(W_e x_t)), the
// intermediate rounded to bf16 as the GPU stores it. Experts crowded onto 20 of 64, the rest empty.
void grouped_gemm_bf16(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], experts = r["experts"], hidden = r["hidden"],
                inter = r["inter"];
  std::vector<float> x_f, w_f, base_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(experts * inter * hidden, w_f, 0.06f));
  auto out = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, base_f));  // unpermute adds onto it
  std::vector<int32_t> ids(tokens * top_k);
  std::vector<float> weights(tokens * top_k);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), r.rng());
    for (int64_t k = 0; k < top_k; ++k) {
      ids[t * top_k + k] = all[k] % 20;
      weights[t * top_k + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(r.rng());
    }
  }
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_w = DeviceArray<float>::from_host(weights);
  const int64_t rows = tokens * top_k;
  DeviceArray<Bf16> x_perm(rows * hidden), h_perm(rows * inter), y_perm(rows * hidden);
  DeviceArray<int32_t> row_of(rows), offsets(experts + 1);
  x_perm.poison();
  DeviceArray<uint8_t> workspace(cuda::moe_permute_workspace_bytes(rows, experts));
  cuda::moe_permute(bf(x), d_ids.data(), tokens, top_k, hidden, experts, bf(x_perm), row_of.data(), offsets.data(),
                    workspace.data(), workspace.size(), nullptr);
  sync();
  const std::vector<int32_t> host_offsets = offsets.to_host();
  DeviceArray<uint8_t> pointers(2 * 3 * experts * sizeof(void*));
  void** pointer_ws = reinterpret_cast<void**>(pointers.data());
  ASSERT_EQ(cuda::grouped_gemm_bf16(r.blas(), bf(x_perm), bf(w), bf(h_perm), host_offsets.data(), experts, inter,
                                    hidden, pointer_ws),
            CUBLAS_STATUS_SUCCESS);
  // Down: W_e^T as a Linear weight [hidden, inter].
  std::vector<float> wt_f(experts * hidden * inter);
  std::vector<Bf16> wt(experts * hidden * inter);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = 0; i < inter; ++i)
      for (int64_t h = 0; h < hidden; ++h) {
        wt_f[(e * hidden + h) * inter + i] = w_f[(e * inter + i) * hidden + h];
        wt[(e * hidden + h) * inter + i] = float_to_bf16(wt_f[(e * hidden + h) * inter + i]);
      }
  auto d_wt = DeviceArray<Bf16>::from_host(wt);
  ASSERT_EQ(cuda::grouped_gemm_bf16(r.blas(), bf(h_perm), bf(d_wt), bf(y_perm), host_offsets.data(), experts, hidden,
                                    inter, pointer_ws + 3 * experts),
            CUBLAS_STATUS_SUCCESS);
  cuda::moe_unpermute(bf(y_perm), row_of.data(), d_w.data(), tokens, top_k, hidden, bf(out), nullptr);
  sync();
  std::vector<float> want = base_f, h(inter), y(hidden);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t e = ids[t * top_k + k];
      cpu::linear(x_f.data() + t * hidden, w_f.data() + e * inter * hidden, nullptr, h.data(), 1, inter, hidden);
      h = round_bf16(h);
      cpu::linear(h.data(), wt_f.data() + e * hidden * inter, nullptr, y.data(), 1, hidden, inter);
      cpu::axpy(weights[t * top_k + k], y.data(), want.data() + t * hidden, hidden);
    }
  r.close("unpermuted sums", to_float(out.to_host()), want);
  EXPECT_EQ(host_offsets.back(), rows);
}

void chunked_gemm_bf16(OpRun& r) {
  const int64_t experts = 3, chunk = r["chunk"], n = r["n"], k = r["k"];
  const std::vector<int32_t> chunk_expert = {0, 0, 2, 1, 2};
  const auto rows = static_cast<int64_t>(chunk_expert.size()) * chunk;
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(rows * k, x_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(experts * n * k, w_f, 0.1f));
  DeviceArray<Bf16> y(rows * n);
  y.poison();
  DeviceArray<uint8_t> pointers(3 * chunk_expert.size() * sizeof(void*));
  ASSERT_EQ(cuda::chunked_gemm_bf16(r.blas(), bf(x), bf(w), bf(y), chunk_expert, chunk, n, k,
                                    reinterpret_cast<void**>(pointers.data())),
            CUBLAS_STATUS_SUCCESS);
  sync();
  std::vector<float> want(rows * n);
  for (size_t j = 0; j < chunk_expert.size(); ++j)
    cpu::linear(x_f.data() + j * chunk * k, w_f.data() + chunk_expert[j] * n * k, nullptr, want.data() + j * chunk * n,
                chunk, n, k);
  r.close("one Linear per chunk", to_float(y.to_host()), want);
}

// The padded layout both pad rows share: 5 experts of 3, 0, 7, 2 and 5 sorted rows, then "elsewhere" rows past them
// (expert parallelism: not copied, pointing at the zero row after the experts' "padded" rows each); row_of a
// permutation of the rows; padded_row(j): where entry j's row lands (the zero row for those elsewhere).
struct PadLayout {
  static constexpr int64_t kExperts = 5;
  std::vector<int32_t> offsets = {0, 3, 3, 10, 12, 17};  // (before rows, which it sizes)
  int64_t padded, rows;
  std::vector<int32_t> row_of, padded_offsets;
  DeviceArray<int32_t> d_offsets, d_padded, d_row_of;
  explicit PadLayout(OpRun& r) : padded(r["padded"]), rows(offsets.back() + r["elsewhere"]) {
    for (int64_t j = 0; j < rows; ++j) row_of.push_back(static_cast<int32_t>((j * 5 + 2) % rows));
    for (int64_t e = 0; e <= kExperts; ++e) padded_offsets.push_back(static_cast<int32_t>(e * padded));
    d_offsets = DeviceArray<int32_t>::from_host(offsets);
    d_padded = DeviceArray<int32_t>::from_host(padded_offsets);
    d_row_of = DeviceArray<int32_t>::from_host(row_of);
  }
  int32_t padded_row(int64_t j) const {
    if (row_of[j] >= offsets.back()) return static_cast<int32_t>(kExperts * padded);
    int64_t e = 0;
    while (offsets[e + 1] <= row_of[j]) ++e;
    return static_cast<int32_t>(e * padded + row_of[j] - offsets[e]);
  }
};

// Each expert's rows copied to its padded place, row_of remapped.
void moe_pad_rows(OpRun& r) {
  PadLayout pad(r);
  const int64_t experts = PadLayout::kExperts, hidden = r["hidden"], padded = pad.padded, rows = pad.rows;
  const std::vector<int32_t>& offsets = pad.offsets;
  std::vector<float> x_f;
  auto x_perm = DeviceArray<Bf16>::from_host(r.random_bf16(rows * hidden, x_f));
  DeviceArray<Bf16> x_pad(experts * padded * hidden);
  x_pad.poison();
  cuda::moe_pad_rows(bf(x_perm), pad.d_offsets.data(), pad.d_padded.data(), experts, rows, hidden, bf(x_pad),
                     pad.d_row_of.data(), nullptr);
  sync();
  const std::vector<float> got_all = to_float(x_pad.to_host());
  std::vector<float> got, want;
  std::vector<int32_t> want_row_of(rows);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t p = offsets[e]; p < offsets[e + 1]; ++p)
      for (int64_t i = 0; i < hidden; ++i) {
        got.push_back(got_all[(e * padded + p - offsets[e]) * hidden + i]);
        want.push_back(x_f[p * hidden + i]);
      }
  for (int64_t j = 0; j < rows; ++j) want_row_of[j] = pad.padded_row(j);
  r.exact("every row at its padded place", got, want);
  r.exact("row_of remapped", pad.d_row_of.to_host(), want_row_of);
}

// moe_pad_rows' layout without the copies: row_of remapped alike, and each padded row's token (entry j's, j / top_k)
// named, -1 on the padding rows.
void moe_pad_sources(OpRun& r) {
  PadLayout pad(r);
  const int64_t experts = PadLayout::kExperts, padded = pad.padded, rows = pad.rows, top_k = r["top_k"];
  DeviceArray<int32_t> sources(experts * padded);
  sources.poison();
  cuda::moe_pad_sources(pad.d_offsets.data(), pad.d_padded.data(), experts, rows, top_k, experts * padded,
                        pad.d_row_of.data(), sources.data(), nullptr);
  sync();
  std::vector<int32_t> want_row_of(rows), want_sources(experts * padded, -1);
  for (int64_t j = 0; j < rows; ++j) {
    want_row_of[j] = pad.padded_row(j);
    if (pad.row_of[j] < pad.offsets.back()) want_sources[want_row_of[j]] = static_cast<int32_t>(j / top_k);
  }
  r.exact("row_of remapped", pad.d_row_of.to_host(), want_row_of);
  r.exact("each padded row's token", sources.to_host(), want_sources);
}

// Routed experts for a few tokens: matrix-vector products straight from the routing. One token (its own load
// shape) and three; top 6, top 5 (the last expert of a down row without a pair) and top 19 (ten pairs a row).
void moe_gemv(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], hidden = r["hidden"], inter = r["inter"];
  const int64_t experts = 16 + top_k;
  std::vector<float> x_f, gu_f, down_f, base_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  auto gate_up = DeviceArray<Bf16>::from_host(r.random_bf16(experts * 2 * inter * hidden, gu_f, 0.06f));
  auto down = DeviceArray<Bf16>::from_host(r.random_bf16(experts * hidden * inter, down_f, 0.08f));
  auto out = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, base_f));  // the sum adds onto it
  std::vector<int32_t> ids(tokens * top_k);
  std::vector<float> weights(tokens * top_k);
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + 3) % experts);
    weights[i] = std::uniform_real_distribution<float>(0.1f, 1.0f)(r.rng());
  }
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_w = DeviceArray<float>::from_host(weights);
  DeviceArray<Bf16> act(tokens * top_k * inter);
  act.poison();
  cuda::moe_gemv_gate_up(bf(x), d_ids.data(), tokens, top_k, hidden, inter, bf(gate_up), swiglu_limit(r), bf(act),
                         nullptr);
  cuda::moe_gemv_down(bf(act), d_ids.data(), d_w.data(), tokens, top_k, hidden, inter, bf(down), bf(out), nullptr);
  sync();
  std::vector<float> want = base_f;
  cpu::moe_experts(x_f.data(), ids.data(), weights.data(), tokens, top_k, hidden, inter, gu_f.data(), down_f.data(),
                   swiglu_limit(r), want.data());
  r.close("routed sums", to_float(out.to_host()), want);
}

// FP4 rows: random bf16 values (a block in eight tiny, one a row zero) quantised on the device and on the CPU —
// the same codes and scales bit for bit — and dequantised back, also bit for bit; values that are FP4 already
// quantise back to themselves.
void fp4_rows(OpRun& r) {
  const int64_t rows = r["rows"], cols = r["cols"];
  std::vector<float> x_f;
  std::vector<Bf16> bits = r.random_bf16(rows * cols, x_f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const int64_t block = i / 32;
    const float v = block % 8 == 3 ? std::ldexp(x_f[i], -30) : block == 5 ? 0.0f : x_f[i];
    bits[i] = float_to_bf16(v);
    x_f[i] = bf16_to_float(bits[i]);
  }
  auto x = DeviceArray<Bf16>::from_host(bits);
  DeviceArray<uint8_t> codes(rows * cols / 2), scales(rows * cols / 32);
  DeviceArray<Bf16> back(rows * cols), again(rows * cols);
  codes.poison();
  scales.poison();
  back.poison();
  cuda::quantize_fp4_rows(bf(x), rows, cols, codes.data(), scales.data(), nullptr);
  cuda::dequantize_fp4_rows(codes.data(), scales.data(), rows, cols, bf(back), nullptr);
  DeviceArray<uint8_t> codes2(rows * cols / 2), scales2(rows * cols / 32);
  cuda::quantize_fp4_rows(bf(back), rows, cols, codes2.data(), scales2.data(), nullptr);
  cuda::dequantize_fp4_rows(codes2.data(), scales2.data(), rows, cols, bf(again), nullptr);
  sync();
  std::vector<uint8_t> want_codes(rows * cols / 2), want_scales(rows * cols / 32);
  std::vector<float> want_back(rows * cols);
  cpu::quantize_fp4_rows(x_f.data(), rows, cols, want_codes.data(), want_scales.data());
  cpu::dequantize_fp4_rows(want_codes.data(), want_scales.data(), rows, cols, want_back.data());
  r.exact("codes", codes.to_host(), want_codes);
  r.exact("scales", scales.to_host(), want_scales);
  r.exact("dequantised", to_float(back.to_host()), want_back);
  r.exact("FP4 values quantised again", again.to_host(), back.to_host());
}

// The routing of a rank's experts under expert parallelism: every fifth (token, k) entry another rank's (id =
// experts), the rest spread over the experts; weights random in [0.1, 1).
void routed_entries(OpRun& r, int64_t entries, int64_t experts, std::vector<int32_t>& ids,
                    std::vector<float>& weights) {
  ids.resize(entries);
  weights.resize(entries);
  for (int64_t i = 0; i < entries; ++i) {
    ids[i] = static_cast<int32_t>(i % 5 == 4 ? experts : (i * 7 + 3) % experts);
    weights[i] = std::uniform_real_distribution<float>(0.1f, 1.0f)(r.rng());
  }
}

// base + the CPU's experts (gate_up [E, 2I, H], down [E, H, I] in fp32) over the entries served here.
std::vector<float> sums_here(const std::vector<float>& x, std::vector<float> base, const std::vector<int32_t>& ids,
                             const std::vector<float>& weights, int64_t tokens, int64_t top_k, int64_t experts,
                             int64_t hidden, int64_t inter, const std::vector<float>& gate_up,
                             const std::vector<float>& down, float swiglu_limit) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t e = ids[t * top_k + k];
      if (e >= experts) continue;
      cpu::moe_experts(x.data() + t * hidden, &e, &weights[t * top_k + k], 1, 1, hidden, inter, gate_up.data(),
                       down.data(), swiglu_limit, base.data() + t * hidden);
    }
  return base;
}

// FP4 routed experts for a few tokens against the CPU's experts on the dequantised weights: ids past the experts
// (entries served on another rank) included, the clamp on and off; the V4.1-Flash hidden size and one that is no
// multiple of a warp's step. The grouped form (moe_grouped_gemv_fp4, the pairs sorted by moe_route) against the
// per-pair kernels bit for bit, with experts of one pair and of several chunks of pairs (40 tokens: ~16 an expert);
// the tensor-core grouped form (moe_grouped_mma_fp4) against the CPU where its shapes allow (multiples of 128).
void moe_gemv_fp4(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], hidden = r["hidden"], inter = r["inter"], experts = 12;
  std::vector<float> x_f, gu_f, down_f, base_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  std::vector<float> gu_raw, down_raw;
  r.random_bf16(experts * 2 * inter * hidden, gu_raw, 0.06f);
  r.random_bf16(experts * hidden * inter, down_raw, 0.08f);
  std::vector<uint8_t> gu_codes(gu_raw.size() / 2), gu_scales(gu_raw.size() / 32), d_codes(down_raw.size() / 2),
      d_scales(down_raw.size() / 32);
  cpu::quantize_fp4_rows(gu_raw.data(), experts * 2 * inter, hidden, gu_codes.data(), gu_scales.data());
  cpu::quantize_fp4_rows(down_raw.data(), experts * hidden, inter, d_codes.data(), d_scales.data());
  gu_f.resize(gu_raw.size());
  down_f.resize(down_raw.size());
  cpu::dequantize_fp4_rows(gu_codes.data(), gu_scales.data(), experts * 2 * inter, hidden, gu_f.data());
  cpu::dequantize_fp4_rows(d_codes.data(), d_scales.data(), experts * hidden, inter, down_f.data());
  const std::vector<Bf16> base = r.random_bf16(tokens * hidden, base_f);
  auto out = DeviceArray<Bf16>::from_host(base);
  std::vector<int32_t> ids;
  std::vector<float> weights;
  routed_entries(r, tokens * top_k, experts, ids, weights);
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_w = DeviceArray<float>::from_host(weights);
  auto dgc = DeviceArray<uint8_t>::from_host(gu_codes), dgs = DeviceArray<uint8_t>::from_host(gu_scales);
  auto ddc = DeviceArray<uint8_t>::from_host(d_codes), dds = DeviceArray<uint8_t>::from_host(d_scales);
  DeviceArray<Bf16> act(tokens * top_k * inter);
  act.poison();
  ASSERT_TRUE(cuda::moe_gemv_fp4_supports(hidden, inter, top_k));
  cuda::moe_gemv_gate_up_fp4(bf(x), d_ids.data(), tokens, top_k, experts, hidden, inter, {dgc.data(), dgs.data()},
                             swiglu_limit(r), bf(act), nullptr);
  cuda::moe_gemv_down_fp4(bf(act), d_ids.data(), d_w.data(), tokens, top_k, experts, hidden, inter,
                          {ddc.data(), dds.data()}, bf(out), nullptr);
  const int64_t n = tokens * top_k;
  DeviceArray<int32_t> row_of(n), token_of_row(n), offsets(experts + 2);
  DeviceArray<Bf16> act_perm(n * inter);
  DeviceArray<float> y_perm(n * hidden);
  ASSERT_TRUE(cuda::moe_grouped_gemv_fp4_supports(hidden, inter));
  cuda::moe_route(d_ids.data(), tokens, top_k, experts + 1, row_of.data(), token_of_row.data(), offsets.data(), nullptr);
  // A grouped form (both take the same arguments) over the sorted pairs, summed onto a copy of the base rows.
  const auto run_grouped = [&](auto form) {
    auto sums = DeviceArray<Bf16>::from_host(base);
    act_perm.poison();
    form(bf(x), token_of_row.data(), offsets.data(), experts, hidden, inter, cuda::Fp4Rows{dgc.data(), dgs.data()},
         cuda::Fp4Rows{ddc.data(), dds.data()}, swiglu_limit(r), bf(act_perm), y_perm.data(), nullptr);
    cuda::moe_grouped_combine(y_perm.data(), d_ids.data(), row_of.data(), d_w.data(), tokens, top_k, experts, hidden,
                              bf(sums), nullptr);
    sync();
    return sums.to_host();
  };
  const std::vector<Bf16> grouped = run_grouped(cuda::moe_grouped_gemv_fp4);
  r.exact("grouped form against the per-pair kernels", grouped, out.to_host());
  const std::vector<float> want =
      sums_here(x_f, base_f, ids, weights, tokens, top_k, experts, hidden, inter, gu_f, down_f, swiglu_limit(r));
  r.close("routed sums", to_float(out.to_host()), want);
  if (!cuda::moe_grouped_mma_fp4_supports(hidden, inter)) return;
  // The tensor-core form (its own summation order): against the CPU.
  r.close("routed sums, the tensor-core grouped form", to_float(run_grouped(cuda::moe_grouped_mma_fp4)), want);
}

// FP8 experts as DeepSeek-V3 stores them (fp32 scales a block x block tile): the per-pair kernels and the grouped form
// against the CPU's experts on the dequantised weights, every fifth pair another rank's.
void moe_gemv_fp8(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], hidden = r["hidden"], inter = r["inter"];
  const int64_t block = r["block"], experts = 4;  // (V3's experts are 44M values each: the CPU side's time)
  std::vector<float> x_f, base_f, gu_raw, down_raw;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  r.random_bf16(experts * 2 * inter * hidden, gu_raw, 0.06f);
  r.random_bf16(experts * hidden * inter, down_raw, 0.08f);
  const auto quantize = [&](const std::vector<float>& raw, int64_t rows, int64_t cols, std::vector<float>& values) {
    std::vector<uint8_t> codes(rows * cols);
    std::vector<float> scales(rows / block * (cols / block));
    cpu::quantize_fp8_scaled(raw.data(), rows, cols, block, codes.data(), scales.data());
    values.resize(rows * cols);
    cpu::dequantize_fp8_scaled(codes.data(), scales.data(), rows, cols, block, values.data());
    return std::pair{DeviceArray<uint8_t>::from_host(codes), DeviceArray<float>::from_host(scales)};
  };
  std::vector<float> gu_f, down_f;
  const auto [gu_codes, gu_scales] = quantize(gu_raw, experts * 2 * inter, hidden, gu_f);
  const auto [d_codes, d_scales] = quantize(down_raw, experts * hidden, inter, down_f);
  const std::vector<Bf16> base = r.random_bf16(tokens * hidden, base_f);
  auto out = DeviceArray<Bf16>::from_host(base);
  std::vector<int32_t> ids;
  std::vector<float> weights;
  routed_entries(r, tokens * top_k, experts, ids, weights);
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_w = DeviceArray<float>::from_host(weights);
  DeviceArray<Bf16> act(tokens * top_k * inter);
  act.poison();
  ASSERT_TRUE(cuda::moe_gemv_fp8_supports(hidden, inter, top_k, block));
  const auto b = static_cast<int32_t>(block);
  cuda::moe_gemv_gate_up_fp8(bf(x), d_ids.data(), tokens, top_k, experts, hidden, inter,
                             {gu_codes.data(), gu_scales.data(), b}, swiglu_limit(r), bf(act), nullptr);
  cuda::moe_gemv_down_fp8(bf(act), d_ids.data(), d_w.data(), tokens, top_k, experts, hidden, inter,
                          {d_codes.data(), d_scales.data(), b}, bf(out), nullptr);
  sync();
  const std::vector<float> want =
      sums_here(x_f, base_f, ids, weights, tokens, top_k, experts, hidden, inter, gu_f, down_f, swiglu_limit(r));
  r.close("routed sums", to_float(out.to_host()), want);
  // The grouped form over the pairs sorted by expert, summed onto a copy of the base rows.
  ASSERT_TRUE(cuda::moe_grouped_gemv_fp8_supports(hidden, inter, block));
  const int64_t n = tokens * top_k;
  DeviceArray<int32_t> row_of(n), token_of_row(n), offsets(experts + 2);
  DeviceArray<Bf16> act_perm(n * inter);
  DeviceArray<float> y_perm(n * hidden);
  act_perm.poison();
  auto sums = DeviceArray<Bf16>::from_host(base);
  cuda::moe_route(d_ids.data(), tokens, top_k, experts + 1, row_of.data(), token_of_row.data(), offsets.data(), nullptr);
  cuda::moe_grouped_gemv_fp8(bf(x), token_of_row.data(), offsets.data(), experts, hidden, inter,
                             {gu_codes.data(), gu_scales.data(), b}, {d_codes.data(), d_scales.data(), b},
                             swiglu_limit(r), bf(act_perm), y_perm.data(), nullptr);
  cuda::moe_grouped_combine(y_perm.data(), d_ids.data(), row_of.data(), d_w.data(), tokens, top_k, experts, hidden,
                            bf(sums), nullptr);
  sync();
  r.close("routed sums, the grouped form", to_float(sums.to_host()), want);
}

// The prefill form of FP4 experts: one projection over expert-sorted rows against FP4 weights, every expert's
// rows in 64-row tiles (expert 1 none, expert 0 several tiles and a partial one), weight rows past a 128-column
// tile's end (n off the tile), k from one scale block to V4.1-Flash's hidden size. Against the CPU's dequantised
// weights times the same bf16 rows in fp32.
void moe_fp4_gemm(OpRun& r) {
  const int64_t n = r["n"], k = r["k"], experts = 5;
  const std::vector<int32_t> counts = {150, 0, 64, 1, 77};
  std::vector<int32_t> offsets = {0};
  for (int32_t c : counts) offsets.push_back(offsets.back() + c);
  const int64_t rows = offsets.back();
  std::vector<float> x_f, w_raw, w_f(experts * n * k);
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(rows * k, x_f));
  r.random_bf16(experts * n * k, w_raw, 0.06f);
  std::vector<uint8_t> codes(experts * n * k / 2), scales(experts * n * k / 32);
  cpu::quantize_fp4_rows(w_raw.data(), experts * n, k, codes.data(), scales.data());
  cpu::dequantize_fp4_rows(codes.data(), scales.data(), experts * n, k, w_f.data());
  auto d_codes = DeviceArray<uint8_t>::from_host(codes), d_scales = DeviceArray<uint8_t>::from_host(scales);
  const std::vector<cuda::Fp4GemmTile> tiles = cuda::fp4_gemm_tiles(offsets);
  std::vector<int32_t> tile_ints;
  for (const cuda::Fp4GemmTile& tile : tiles) tile_ints.insert(tile_ints.end(), {tile.expert, tile.first_row, tile.rows});
  auto d_tiles = DeviceArray<int32_t>::from_host(tile_ints);
  DeviceArray<Bf16> y(rows * n);
  y.poison();
  cuda::moe_fp4_gemm(bf(x), {d_codes.data(), d_scales.data()}, reinterpret_cast<const cuda::Fp4GemmTile*>(d_tiles.data()),
                     static_cast<int64_t>(tiles.size()), n, k, bf(y), nullptr);
  sync();
  std::vector<float> want(rows * n);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t row = offsets[e]; row < offsets[e + 1]; ++row)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(x_f[row * k + i]) * w_f[(e * n + j) * k + i];
        want[row * n + j] = static_cast<float>(sum);
      }
  r.close("projected rows", to_float(y.to_host()), want);
}

// Route, the grouped expert kernels, unpermute (the decode path above 64 pairs). Expert 0 is chosen by every
// token (more rows than one 64-row pass when tokens > 64), experts from `used` on by none. Twice on the same sync
// words: the first launch must leave them as the second needs them (zero), and the items' order among blocks
// differs from launch to launch while the result must not.
void moe_grouped_experts(OpRun& r) {
  const int64_t tokens = r["tokens"], experts = r["experts"], used = r["used"], hidden = r["hidden"],
                inter = r["inter"];
  const int64_t top_k = 6, rows = tokens * top_k;
  std::vector<float> x_f, gu_f, down_f, base_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  auto gate_up = DeviceArray<Bf16>::from_host(r.random_bf16(experts * 2 * inter * hidden, gu_f, 0.06f));
  auto down = DeviceArray<Bf16>::from_host(r.random_bf16(experts * hidden * inter, down_f, 0.08f));
  auto out = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, base_f));  // unpermute adds onto it
  std::vector<int32_t> ids(rows);
  std::vector<float> weights(rows);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> others(used - 1);
    std::iota(others.begin(), others.end(), 1);
    std::shuffle(others.begin(), others.end(), r.rng());
    for (int64_t k = 0; k < top_k; ++k) {
      ids[t * top_k + k] = k == t % top_k ? 0 : others[k];
      weights[t * top_k + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(r.rng());
    }
  }
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_w = DeviceArray<float>::from_host(weights);
  DeviceArray<Bf16> act(rows * inter), y_perm(rows * hidden);
  DeviceArray<int32_t> row_of(rows), token_of_row(rows), offsets(experts + 1);
  act.poison();
  cuda::moe_route(d_ids.data(), tokens, top_k, experts, row_of.data(), token_of_row.data(), offsets.data(), nullptr);
  auto sync_words = DeviceArray<int32_t>::from_host(std::vector<int32_t>(cuda::moe_grouped_sync_ints(experts), 0));
  std::vector<Bf16> first_y;
  for (int launch = 0; launch < 2; ++launch) {
    y_perm.poison();
    ASSERT_EQ(cuda::moe_grouped_experts(bf(x), token_of_row.data(), offsets.data(), experts, hidden, inter,
                                        bf(gate_up), bf(down), swiglu_limit(r), bf(act), bf(y_perm),
                                        sync_words.data(), num_sms(), nullptr),
              cudaSuccess);
    sync();
    if (launch == 0) first_y = y_perm.to_host();
    else r.exact("the second launch's rows against the first's", y_perm.to_host(), first_y);
    r.exact("sync words left zero", sync_words.to_host(), std::vector<int32_t>(sync_words.size(), 0));
  }
  cuda::moe_unpermute(bf(y_perm), row_of.data(), d_w.data(), tokens, top_k, hidden, bf(out), nullptr);
  sync();
  ASSERT_EQ(offsets.to_host()[1], tokens);
  std::vector<float> want = base_f;
  cpu::moe_experts(x_f.data(), ids.data(), weights.data(), tokens, top_k, hidden, inter, gu_f.data(), down_f.data(),
                   swiglu_limit(r), want.data());
  r.close("routed sums", to_float(out.to_host()), want);
}

// moe_route against moe_permute (a stable radix sort): the same offsets and row_of, and token_of_row the inverse of
// row_of. Up to the 4,096-pair limit, with empty experts (skewed ids: the top fifth never), and expert counts not a
// multiple of 32 (65: the expert-parallel extra id).
void moe_route(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], experts = r["experts"];
  const int64_t n = tokens * top_k, hidden = 8;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i)
    ids[i] = static_cast<int32_t>(std::min<int64_t>(
        std::uniform_int_distribution<int64_t>(0, experts * 4 / 5 - 1)(r.rng()),
        std::uniform_int_distribution<int64_t>(0, experts * 4 / 5 - 1)(r.rng())));
  std::vector<float> x_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  DeviceArray<Bf16> x_perm(n * hidden);
  DeviceArray<int32_t> want_row_of(n), want_offsets(experts + 1), row_of(n), token_of_row(n), offsets(experts + 1);
  row_of.poison();
  token_of_row.poison();
  offsets.poison();
  DeviceArray<uint8_t> workspace(cuda::moe_permute_workspace_bytes(n, experts));
  cuda::moe_permute(bf(x), d_ids.data(), tokens, top_k, hidden, experts, bf(x_perm), want_row_of.data(),
                    want_offsets.data(), workspace.data(), workspace.size(), nullptr);
  cuda::moe_route(d_ids.data(), tokens, top_k, experts, row_of.data(), token_of_row.data(), offsets.data(), nullptr);
  sync();
  r.exact("offsets against moe_permute's", offsets.to_host(), want_offsets.to_host());
  const std::vector<int32_t> got_row_of = row_of.to_host(), tokens_of = token_of_row.to_host();
  r.exact("row_of against moe_permute's", got_row_of, want_row_of.to_host());
  std::vector<int32_t> token_of_pair(n), want_token_of_pair(n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(got_row_of[i], 0);
    ASSERT_LT(got_row_of[i], n);
    token_of_pair[i] = tokens_of[got_row_of[i]];
    want_token_of_pair[i] = static_cast<int32_t>(i / top_k);
  }
  r.exact("token_of_row inverts row_of", token_of_pair, want_token_of_pair);
}

}  // namespace

// Logical expert ids to the places of a store holding a few of them (a rank's EP slots): held experts to their
// places, the rest and the "served elsewhere" id to the store's capacity.
void remap_expert_ids(OpRun& r) {
  const int64_t experts = r["experts"], held = r["held"], n = 3000;
  std::vector<int32_t> places(experts, static_cast<int32_t>(held)), ids(n);
  for (int64_t p = 0; p < held; ++p) places[(p * 7 + 3) % experts] = static_cast<int32_t>(held - 1 - p);
  for (int32_t& id : ids) id = static_cast<int32_t>(r.rng()() % (experts + 1));  // experts: served elsewhere
  auto d_ids = DeviceArray<int32_t>::from_host(ids), d_places = DeviceArray<int32_t>::from_host(places);
  DeviceArray<int32_t> out(n);
  out.poison();
  cuda::remap_expert_ids(d_ids.data(), n, d_places.data(), experts, static_cast<int32_t>(held), out.data(), nullptr);
  sync();
  std::vector<int32_t> want(n);
  cpu::remap_expert_ids(ids.data(), n, places.data(), experts, static_cast<int32_t>(held), want.data());
  r.exact("places", out.to_host(), want);
}

// Under expert parallelism the last id (entries served on another rank) is sorted like the others but its rows
// are not copied: the copied rows are x's, the others keep the poison, row_of and offsets are the full permute's.
void moe_permute_copied(OpRun& r) {
  const int64_t tokens = r["tokens"], top_k = r["top_k"], experts = r["experts"], hidden = 64;
  const int64_t num_ids = experts + 1, n = tokens * top_k;
  std::vector<float> x_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * hidden, x_f));
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(r.rng()() % 3 == 0 ? r.rng()() % experts : experts);
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  DeviceArray<Bf16> x_perm(n * hidden), x_all(n * hidden);
  DeviceArray<int32_t> row_of(n), offsets(num_ids + 1), row_of_all(n), offsets_all(num_ids + 1);
  x_perm.poison();
  DeviceArray<uint8_t> workspace(cuda::moe_permute_workspace_bytes(n, num_ids));
  cuda::moe_permute(bf(x), d_ids.data(), tokens, top_k, hidden, num_ids, bf(x_perm), row_of.data(), offsets.data(),
                    workspace.data(), workspace.size(), nullptr, experts);
  cuda::moe_permute(bf(x), d_ids.data(), tokens, top_k, hidden, num_ids, bf(x_all), row_of_all.data(),
                    offsets_all.data(), workspace.data(), workspace.size(), nullptr);
  sync();
  r.exact("row_of", row_of.to_host(), row_of_all.to_host());
  const std::vector<int32_t> host_offsets = offsets.to_host();
  r.exact("offsets", host_offsets, offsets_all.to_host());
  // As bits: the poison (0xffff) is a NaN.
  std::vector<uint16_t> got_bits(n * hidden), want_bits(n * hidden, 0xffff);
  const std::vector<Bf16> got = x_perm.to_host(), all = x_all.to_host();
  std::memcpy(got_bits.data(), got.data(), got_bits.size() * sizeof(uint16_t));
  std::memcpy(want_bits.data(), all.data(), host_offsets[experts] * hidden * sizeof(uint16_t));
  r.exact("copied rows, untouched rest", got_bits, want_bits);
}

// A rank slice's combine: chosen rows added at distinct destination rows, the others untouched.
void add_rows_at(OpRun& r) {
  const int64_t src_rows = r["src_rows"], dst_rows = r["dst_rows"], n = r["n"], hidden = r["hidden"];
  std::vector<float> src_f, dst_f;
  auto src = DeviceArray<Bf16>::from_host(r.random_bf16(src_rows * hidden, src_f));
  auto dst = DeviceArray<Bf16>::from_host(r.random_bf16(dst_rows * hidden, dst_f));
  std::vector<int32_t> from(n), to(dst_rows);
  std::iota(to.begin(), to.end(), 0);
  std::shuffle(to.begin(), to.end(), r.rng());
  to.resize(n);
  for (int32_t& f : from) f = static_cast<int32_t>(r.rng()() % src_rows);
  auto d_from = DeviceArray<int32_t>::from_host(from), d_to = DeviceArray<int32_t>::from_host(to);
  cuda::add_rows_at(bf(src), d_from.data(), d_to.data(), n, hidden, bf(dst), nullptr);
  sync();
  cpu::add_rows_at(src_f.data(), from.data(), to.data(), n, hidden, dst_f.data());
  r.close("rows", to_float(dst.to_host()), round_bf16(dst_f));
}

// --batch-invariant's expert-parallel entries: rows picked in any order, repeats allowed, copied bit for bit.
void gather_rows(OpRun& r) {
  const int64_t src_rows = r["src_rows"], n = r["n"], hidden = r["hidden"];
  std::vector<float> src_f;
  auto src = DeviceArray<Bf16>::from_host(r.random_bf16(src_rows * hidden, src_f));
  std::vector<int32_t> from(n);
  for (int32_t& f : from) f = static_cast<int32_t>(r.rng()() % src_rows);
  auto d_from = DeviceArray<int32_t>::from_host(from);
  DeviceArray<Bf16> dst(std::max<int64_t>(n, 1) * hidden);
  dst.poison();
  cuda::gather_rows(bf(src), d_from.data(), n, hidden, bf(dst), nullptr);
  sync();
  std::vector<float> want(n * hidden);
  cpu::gather_rows(src_f.data(), from.data(), n, hidden, want.data());
  std::vector<float> got = to_float(dst.to_host());
  got.resize(n * hidden);
  r.exact("rows", got, want);
}

void add_moe_rows(OpTable& t) {
  for (auto [tokens, top_k, experts] : {std::tuple<int64_t, int64_t, int64_t>{300, 6, 7}, {33, 8, 96}, {1, 1, 1}})
    t.add("moe_permute_copied", "bf16", {{"tokens", tokens}, {"top_k", top_k}, {"experts", experts}}, kExact,
          moe_permute_copied);
  for (auto [src_rows, dst_rows, n, hidden] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{40, 32, 20, 5120}, {3, 3, 3, 200}, {10, 8, 0, 64}})
    t.add("add_rows_at", "bf16", {{"src_rows", src_rows}, {"dst_rows", dst_rows}, {"n", n}, {"hidden", hidden}},
          kBf16, add_rows_at);
  for (auto [src_rows, n, hidden] : {std::tuple<int64_t, int64_t, int64_t>{48, 48, 4096}, {7, 30, 200}, {5, 0, 64}})
    t.add("gather_rows", "bf16", {{"src_rows", src_rows}, {"n", n}, {"hidden", hidden}}, kExact, gather_rows);
  for (auto [experts, held] : {std::pair<int64_t, int64_t>{384, 6}, {384, 96}, {8, 8}})
    t.add("remap_expert_ids", "i32", {{"experts", experts}, {"held", held}}, kExact, remap_expert_ids);
  for (auto [top_k, hidden] : {std::pair<int64_t, int64_t>{6, 2048}, {8, 7168}, {2, 200}})
    t.add("moe_unpermute_add_rms_norm", "bf16", {{"tokens", 5}, {"top_k", top_k}, {"hidden", hidden}}, kExact,
          moe_unpermute_add_rms_norm);
  for (int64_t version : {2, 3, 41})
    t.add("route_topk", "f32", {{"tokens", 300}, {"version", version}}, 1e-5, route_topk);
  t.add("grouped_gemm_bf16", "bf16",
        {{"tokens", 123}, {"top_k", 6}, {"experts", 64}, {"hidden", 256}, {"inter", 128}}, kBf16, grouped_gemm_bf16);
  t.add("chunked_gemm_bf16", "bf16", {{"chunk", 8}, {"n", 48}, {"k", 64}}, kBf16, chunked_gemm_bf16);
  for (int64_t elsewhere : {0, 4})
    t.add("moe_pad_rows", "bf16", {{"hidden", 24}, {"padded", 7}, {"elsewhere", elsewhere}}, kExact, moe_pad_rows);
  for (int64_t elsewhere : {0, 4})
    t.add("moe_pad_sources", "i32", {{"padded", 8}, {"elsewhere", elsewhere}, {"top_k", 3}}, kExact, moe_pad_sources);
  for (auto [tokens, top_k] : {std::pair<int64_t, int64_t>{1, 6}, {3, 6}, {1, 5}, {2, 19}})
    for (int64_t limit : {0, 500})
      t.add("moe_gemv", "bf16",
            {{"tokens", tokens}, {"top_k", top_k}, {"hidden", 256}, {"inter", 136}, {"limit_milli", limit}}, kBf16,
            moe_gemv);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{40, 5120}, {64, 2304}, {3, 32}})
    t.add("fp4_rows", "u8", {{"rows", rows}, {"cols", cols}}, kExact, fp4_rows);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 5120}, {200, 2304}, {64, 32}, {4608, 96}})
    t.add("moe_fp4_gemm", "bf16", {{"n", n}, {"k", k}}, kBf16, moe_fp4_gemm);
  for (auto [tokens, top_k, hidden, inter] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 6, 5120, 256},
                                              {3, 6, 320, 96}, {40, 6, 64, 32}, {2, 5, 512, 2304},
                                              {40, 3, 384, 2304}})
    for (int64_t limit : {0, 500})
      t.add("moe_gemv_fp4", "bf16",
            {{"tokens", tokens}, {"top_k", top_k}, {"hidden", hidden}, {"inter", inter}, {"limit_milli", limit}},
            kBf16, moe_gemv_fp4);
  // DeepSeek-V3's experts (hidden 7168, inter 2048, top-8, 128 x 128 tiles) at a token, a few tokens at a smaller
  // width, and the FP8 fixture's (16 x 16 tiles); the clamp at one.
  for (auto [tokens, top_k, hidden, inter, block, limit] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{1, 8, 7168, 2048, 128, 0},
        {5, 8, 1024, 512, 128, 0}, {7, 4, 64, 32, 16, 0}, {3, 6, 256, 384, 128, 500}})
    t.add("moe_gemv_fp8", "bf16",
          {{"tokens", tokens}, {"top_k", top_k}, {"hidden", hidden}, {"inter", inter}, {"block", block},
           {"limit_milli", limit}},
          kBf16, moe_gemv_fp8);
  // Shapes off the kernels' tiles (hidden 200 = 3 x 64 + 8, inter 136 = 2 x 64 + 8) with fewer items than blocks;
  // and several items a block (63 passes), so the pipeline runs from item to item inside a block.
  for (int64_t limit : {0, 500})
    t.add("moe_grouped_experts", "bf16",
          {{"tokens", 80}, {"experts", 16}, {"used", 12}, {"hidden", 200}, {"inter", 136}, {"limit_milli", limit}},
          kBf16, moe_grouped_experts);
  t.add("moe_grouped_experts", "bf16",
        {{"tokens", 200}, {"experts", 64}, {"used", 60}, {"hidden", 1024}, {"inter", 704}, {"limit_milli", 0}}, kBf16,
        moe_grouped_experts);
  for (auto [tokens, top_k, experts] : {std::tuple<int64_t, int64_t, int64_t>{1, 6, 64}, {37, 6, 65}, {256, 6, 64},
                                        {682, 6, 65}, {512, 8, 257}, {1024, 4, 16}})
    t.add("moe_route", "i32", {{"tokens", tokens}, {"top_k", top_k}, {"experts", experts}}, kExact, moe_route);
}

}  // namespace deepinfer::op_test
