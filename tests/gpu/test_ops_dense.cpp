// Op-table rows: the dense ops — embedding, norms, cache entries, conversions, RoPE, SwiGLU, the Linear
// kernels (cuBLAS, matrix-vector, skinny tensor-core, per-head) and sampling.
#include <algorithm>
#include <bit>
#include <numeric>
#include <tuple>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "src/model/weights.h"

#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

void embedding(OpRun& r) {
  const int64_t vocab = r["vocab"], dim = r["dim"], tokens = r["tokens"];
  std::vector<float> table_f;
  auto table = DeviceArray<Bf16>::from_host(r.random_bf16(vocab * dim, table_f));
  std::vector<int32_t> ids(tokens);
  for (auto& id : ids) id = static_cast<int32_t>(r.rng()() % vocab);
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  DeviceArray<Bf16> out(tokens * dim);
  out.poison();
  cuda::embedding(bf(table), d_ids.data(), bf(out), tokens, dim, nullptr);
  sync();
  std::vector<float> want(tokens * dim);
  cpu::embedding(table_f.data(), ids.data(), want.data(), tokens, dim);
  r.close("rows", to_float(out.to_host()), want);
}

// Rows of raw bytes into a strided output (the split engram tables' serving side: codes and scales interleaved).
void gather_byte_rows(OpRun& r) {
  const int64_t table_rows = r["table_rows"], row_bytes = r["row_bytes"], n = r["rows"], stride = r["stride"];
  std::vector<uint8_t> table(table_rows * row_bytes);
  for (auto& b : table) b = static_cast<uint8_t>(r.rng()());
  std::vector<int64_t> rows(n);
  for (auto& row : rows) row = static_cast<int64_t>(r.rng()() % table_rows);
  auto d_table = DeviceArray<uint8_t>::from_host(table);
  auto d_rows = DeviceArray<int64_t>::from_host(rows);
  std::vector<uint8_t> want(n * stride, 0xa5);
  auto out = DeviceArray<uint8_t>::from_host(want);  // the gaps between rows must stay as they were
  cuda::gather_byte_rows(d_table.data(), row_bytes, d_rows.data(), n, out.data(), stride, nullptr);
  sync();
  cpu::gather_byte_rows(table.data(), row_bytes, rows.data(), n, want.data(), stride);
  r.exact("rows and the bytes between them", out.to_host(), want);
}

// Rows of a step plan's int32 tables (block tables, lengths) at device row indices, repeats allowed.
void gather_int32_rows(OpRun& r) {
  const int64_t table_rows = r["table_rows"], width = r["width"], n = r["rows"];
  std::vector<int32_t> table(table_rows * width);
  for (auto& v : table) v = static_cast<int32_t>(r.rng()());
  std::vector<int32_t> rows(n);
  for (auto& row : rows) row = static_cast<int32_t>(r.rng()() % table_rows);
  auto d_table = DeviceArray<int32_t>::from_host(table);
  auto d_rows = DeviceArray<int32_t>::from_host(rows);
  DeviceArray<int32_t> out(n * width);
  out.poison();
  cuda::gather_int32_rows(d_table.data(), width, d_rows.data(), n, out.data(), nullptr);
  sync();
  std::vector<int32_t> want;
  for (const int32_t row : rows)
    want.insert(want.end(), table.begin() + row * width, table.begin() + (row + 1) * width);
  r.exact("rows", out.to_host(), want);
}

// The vectorised kernel (dim a multiple of 8, up to 8,192: 2048, 7168 = four pieces a thread, 200 = fewer pieces
// than threads) and the strided one (2050, 9216), with and without the residual add.
void add_rms_norm(OpRun& r) {
  const int64_t rows = r["rows"], dim = r["dim"];
  const bool add = r["add"] != 0;
  std::vector<float> x_f, res_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(rows * dim, x_f));
  auto res = DeviceArray<Bf16>::from_host(r.random_bf16(rows * dim, res_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(dim, w_f));
  DeviceArray<Bf16> out(rows * dim);
  out.poison();
  cuda::add_rms_norm(add ? bf(x) : nullptr, bf(res), bf(w), bf(out), rows, dim, 1e-6f, nullptr);
  sync();
  std::vector<float> want(rows * dim);
  cpu::add_rms_norm(add ? x_f.data() : nullptr, res_f.data(), w_f.data(), want.data(), rows, dim, 1e-6f);
  r.exact("the residual, updated in place (bf16 of the fp32 sum)", to_float(res.to_host()), round_bf16(res_f));
  r.close("normalised", to_float(out.to_host()), want);
}

void rms_norm_strided_in_place(OpRun& r) {
  const int64_t rows = r["rows"], dim = r["dim"], stride = r["stride"];  // the latent part of [latent | k_pe] rows
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(rows * stride, x_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(dim, w_f));
  cuda::rms_norm(bf(x), stride, bf(w), bf(x), stride, rows, dim, 1e-6f, nullptr);
  sync();
  std::vector<float> want = x_f;
  for (int64_t i = 0; i < rows; ++i)
    cpu::rms_norm(x_f.data() + i * stride, w_f.data(), want.data() + i * stride, 1, dim, 1e-6f);
  r.close("rows and the untouched tails", to_float(x.to_host()), want);
}

// Dummy weights generated on the device equal the host's (both draw N(0,1) in double precision from the same
// counter-based generator; libm and CUDA may differ in the last bit of log/cos, hence 1e-6 in fp32, not 0).
// A function, not a global: the table is built during another file's static initialisation.
const std::vector<std::pair<std::string, Shape>>& dummy_tensors() {
  static const std::vector<std::pair<std::string, Shape>> tensors = {
      {"model.layers.3.mlp.experts.7.up_proj.weight", {64, 300}},
      {"model.norm.weight", {4096}},
      {"model.layers.1.mlp.gate.e_score_correction_bias", {256}}};
  return tensors;
}

void fill_dummy(OpRun& r, bool f32) {
  const auto& [name, shape] = dummy_tensors()[r["tensor"]];
  const Tensor host = make_dummy_tensor(name, shape, 42);
  const std::vector<float> want(host.data<float>(), host.data<float>() + host.numel());
  const DummyRule rule = dummy_rule(name, shape, 42);
  if (f32) {
    DeviceArray<float> out(host.numel());
    out.poison();
    cuda::fill_dummy_f32(out.data(), host.numel(), rule.key, rule.scale, rule.offset, nullptr);
    sync();
    r.close(name, out.to_host(), want);
  } else {
    DeviceArray<Bf16> out(host.numel());
    out.poison();
    cuda::fill_dummy_bf16(bf(out), host.numel(), rule.key, rule.scale, rule.offset, nullptr);
    sync();
    r.close(name, to_float(out.to_host()), want);
  }
}

void kv_entries(OpRun& r) {
  // Written as the first `dim` of wider cache rows, then gathered at the full width (the tail as it was: zeros).
  const int64_t tokens = r["tokens"], dim = r["dim"], src_stride = r["src_stride"], slots_total = r["slots"];
  const int64_t width = r["cache_stride"];
  std::vector<float> src_f;
  auto src = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * src_stride, src_f));
  std::vector<int64_t> all(slots_total);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), r.rng());
  const std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
  auto d_slots = DeviceArray<int64_t>::from_host(slots);
  auto cache = DeviceArray<Bf16>::from_host(std::vector<Bf16>(slots_total * width, 0));
  DeviceArray<Bf16> out(tokens * width);
  out.poison();
  cuda::write_kv_entries(bf(src), src_stride, d_slots.data(), tokens, dim, bf(cache), width, nullptr);
  cuda::gather_kv_entries(bf(cache), d_slots.data(), tokens, width, bf(out), nullptr);
  sync();
  std::vector<float> cache_f(slots_total * width, 0.0f), want(tokens * width);
  cpu::write_kv_entries(src_f.data(), src_stride, slots.data(), tokens, dim, cache_f.data(), width);
  cpu::gather_kv_entries(cache_f.data(), slots.data(), tokens, width, want.data());
  r.close("written, then gathered", to_float(out.to_host()), want);
}

void bf16_to_f32(OpRun& r) {
  const int64_t n = r["n"];
  std::vector<float> y_f;
  auto y = DeviceArray<Bf16>::from_host(r.random_bf16(n, y_f));
  DeviceArray<float> out(n);
  out.poison();
  cuda::bf16_to_f32(bf(y), out.data(), n, nullptr);
  sync();
  r.close("values", out.to_host(), y_f);
}

void f32_to_bf16(OpRun& r) {  // of values that are bf16 already: an exact round trip
  const int64_t n = r["n"];
  std::vector<float> x_f;
  r.random_bf16(n, x_f);
  auto x = DeviceArray<float>::from_host(x_f);
  DeviceArray<Bf16> out(n);
  out.poison();
  cuda::f32_to_bf16(x.data(), bf(out), n, nullptr);
  sync();
  r.close("values", to_float(out.to_host()), x_f);
}

void add_f32_into_bf16(OpRun& r) {
  const int64_t n = r["n"];
  std::vector<float> y_f, x_f;
  auto y = DeviceArray<Bf16>::from_host(r.random_bf16(n, y_f));
  r.random_bf16(n, x_f);
  auto x = DeviceArray<float>::from_host(x_f);
  cuda::add_f32_into_bf16(x.data(), bf(y), n, nullptr);
  sync();
  cpu::axpy(1.0f, x_f.data(), y_f.data(), n);
  r.close("sums", to_float(y.to_host()), y_f);
}

void rope(OpRun& r) {
  const int64_t tokens = r["tokens"], heads = r["heads"], row = r["row"], nope = r["nope"], rope_dim = r["rope"];
  const bool interleaved = r["interleaved"] != 0;
  std::vector<float> inv_freq(rope_dim / 2);
  for (int64_t i = 0; i < rope_dim / 2; ++i)
    inv_freq[i] = std::pow(10000.0f, -2.0f * i / rope_dim) * (i % 3 ? 1.0f : 0.25f);
  auto d_inv = DeviceArray<float>::from_host(inv_freq);
  std::vector<int32_t> positions(tokens);
  for (auto& p : positions) p = static_cast<int32_t>(r.rng()() % 4000);
  auto d_pos = DeviceArray<int32_t>::from_host(positions);
  std::vector<float> x_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * heads * row, x_f));
  cuda::rope(bf(x) + nope, tokens * heads, row, rope_dim, d_pos.data(), heads, d_inv.data(), 1.3f, interleaved, nullptr);
  sync();
  std::vector<float> cos(tokens * rope_dim / 2), sin(tokens * rope_dim / 2);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < rope_dim / 2; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos[t * rope_dim / 2 + i] = std::cos(angle) * 1.3f;
      sin[t * rope_dim / 2 + i] = std::sin(angle) * 1.3f;
    }
  cpu::rope(x_f.data() + nope, tokens * heads, row, rope_dim, cos.data(), sin.data(), heads,
            interleaved ? cpu::RopeLayout::kInterleaved : cpu::RopeLayout::kHalf);
  r.close("rotated rows", to_float(x.to_host()), x_f);
}

void silu_mul(OpRun& r) {
  const int64_t rows = r["rows"], inter = r["inter"];
  std::vector<float> gu_f;
  auto gu = DeviceArray<Bf16>::from_host(r.random_bf16(rows * 2 * inter, gu_f));
  DeviceArray<Bf16> out(rows * inter);
  out.poison();
  cuda::silu_mul(bf(gu), bf(out), rows, inter, swiglu_limit(r), nullptr);
  sync();
  std::vector<float> want(rows * inter);
  for (int64_t i = 0; i < rows; ++i) {
    float *gate = gu_f.data() + i * 2 * inter, *up = gate + inter;
    cpu::clamp_swiglu(gate, up, inter, swiglu_limit(r));
    cpu::silu_mul(gate, up, want.data() + i * inter, inter);
  }
  r.close("activations", to_float(out.to_host()), want);
}

// x [m, k] and w [n, k] as bf16 on the device, and the CPU form's y = x w^T of the same values.
struct LinearInputs {
  DeviceArray<Bf16> x, w;
  std::vector<float> want;
  LinearInputs(OpRun& r, int64_t m, int64_t n, int64_t k, float w_scale) : want(m * n) {
    std::vector<float> x_f, w_f;
    x = DeviceArray<Bf16>::from_host(r.random_bf16(m * k, x_f));
    w = DeviceArray<Bf16>::from_host(r.random_bf16(n * k, w_f, w_scale));
    cpu::linear(x_f.data(), w_f.data(), nullptr, want.data(), m, n, k);
  }
};

// cuBLAS's Linear, bf16 or fp32 out.
void linear_bf16(OpRun& r) {
  const int64_t m = r["m"], n = r["n"], k = r["k"];
  const bool f32 = r["f32_out"] != 0;
  LinearInputs in(r, m, n, k, 0.02f);
  auto &x = in.x, &w = in.w;
  const std::vector<float>& want = in.want;
  LinearOutput y(f32, m * n);
  ASSERT_EQ(cuda::linear_bf16(r.blas(), bf(x), bf(w), y.data(), f32, m, n, k), CUBLAS_STATUS_SUCCESS);
  sync();
  r.close("y", y.host(), want);
}

// The MLA absorption shape: per head, q_latent[T, latent] = q_nope[T, nope] . W_uk[h] ([nope, latent]), written
// into a wider [latent | rope] row as the decode path does.
void gemm_bf16(OpRun& r) {
  const int64_t tokens = r["tokens"], heads = r["heads"], nope = r["nope"], latent = r["latent"];
  const int64_t v = 128, qk = nope + 64, out_row = latent + 64;
  std::vector<float> q_f, w_f;
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * heads * qk, q_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(heads * (nope + v) * latent, w_f, 0.05f));
  DeviceArray<Bf16> y(tokens * heads * out_row);
  y.poison();
  ASSERT_EQ(cuda::gemm_bf16(r.blas(), tokens, latent, nope, {q.data(), heads * qk, qk},
                            {w.data(), latent, (nope + v) * latent}, false, y.data(), heads * out_row, out_row, false,
                            heads),
            CUBLAS_STATUS_SUCCESS);
  sync();
  std::vector<float> want(tokens * heads * out_row, 0.0f);
  cpu::batched_gemv_transposed(q_f.data(), w_f.data(), want.data(), heads, tokens, latent, nope,
                               {heads * qk, qk, (nope + v) * latent, heads * out_row, out_row, latent});
  const std::vector<float> got_all = to_float(y.to_host());
  std::vector<float> got, want_latent;
  for (int64_t t = 0; t < tokens * heads; ++t)
    for (int64_t c = 0; c < latent; ++c) {
      got.push_back(got_all[t * out_row + c]);
      want_latent.push_back(want[t * out_row + c]);
    }
  r.close("latent parts", got, want_latent);
}

// Matrix-vector kernels at every row count they take, k off the 4 x 32-piece batch (264).
struct GemvInputs {
  int64_t hidden, inter;
  std::vector<float> x_f, gu_f, down_f;
  DeviceArray<Bf16> x, gate_up, down;
  explicit GemvInputs(OpRun& r) : hidden(r["hidden"]), inter(r["inter"]) {
    x = DeviceArray<Bf16>::from_host(r.random_bf16(r["rows"] * hidden, x_f));
    gate_up = DeviceArray<Bf16>::from_host(r.random_bf16(2 * inter * hidden, gu_f, 0.06f));
    down = DeviceArray<Bf16>::from_host(r.random_bf16(hidden * inter, down_f, 0.08f));
  }
};

void swiglu_gemv(OpRun& r) {
  GemvInputs in(r);
  const int64_t rows = r["rows"], H = in.hidden, I = in.inter;
  DeviceArray<Bf16> act(rows * I);
  act.poison();
  cuda::swiglu_gemv(bf(in.x), bf(in.gate_up), bf(act), rows, I, H, swiglu_limit(r), nullptr);
  sync();
  std::vector<float> gate(rows * I), up(rows * I), want(rows * I);
  cpu::linear(in.x_f.data(), in.gu_f.data(), nullptr, gate.data(), rows, I, H);
  cpu::linear(in.x_f.data(), in.gu_f.data() + I * H, nullptr, up.data(), rows, I, H);
  cpu::clamp_swiglu(gate.data(), up.data(), rows * I, swiglu_limit(r));
  cpu::silu_mul(gate.data(), up.data(), want.data(), rows * I);
  r.close("activations", to_float(act.to_host()), want);
}

void linear_gemv(OpRun& r) {
  GemvInputs in(r);
  const int64_t rows = r["rows"], H = in.hidden, I = in.inter;
  const bool f32 = r["f32_out"] != 0;
  // bf16 out: the up projection [I, H]; fp32 out: the down projection [H, I] of bf16 activations.
  const int64_t n = f32 ? H : I, k = f32 ? I : H;
  std::vector<float> act_f;
  auto act = DeviceArray<Bf16>::from_host(r.random_bf16(rows * I, act_f));
  const __nv_bfloat16* x = f32 ? bf(act) : bf(in.x);
  const __nv_bfloat16* w = f32 ? bf(in.down) : bf(in.gate_up) + I * H;
  LinearOutput y(f32, rows * n);
  cuda::linear_gemv(x, w, y.data(), f32, rows, n, k, nullptr);
  sync();
  std::vector<float> want(rows * n);
  cpu::linear(f32 ? act_f.data() : in.x_f.data(), f32 ? in.down_f.data() : in.gu_f.data() + I * H, nullptr,
              want.data(), rows, n, k);
  r.close("y", y.host(), want);
}

// The decode-batch Linear (k split over a block cluster) at row counts that fill 1..4 MMA row tiles and leave
// partial ones: n off the 64-column tile (200) and off 4-column groups (198), k off the 64-deep stage (264). Its
// sums meet in a fixed order, so two runs agree bit for bit.
void linear_skinny(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], k = r["k"];
  const bool f32 = r["f32_out"] != 0;
  LinearInputs in(r, rows, n, k, 0.05f);
  auto &x = in.x, &w = in.w;
  const std::vector<float>& want = in.want;
  if (f32) {
    DeviceArray<float> out(rows * n), again(rows * n);
    out.poison();
    again.poison();
    cuda::linear_skinny(bf(x), bf(w), out.data(), true, rows, n, k, num_sms(), nullptr);
    cuda::linear_skinny(bf(x), bf(w), again.data(), true, rows, n, k, num_sms(), nullptr);
    sync();
    r.close("y", out.to_host(), want);
    r.exact("a second run", again.to_host(), out.to_host());
  } else {
    DeviceArray<Bf16> out(rows * n), again(rows * n);
    out.poison();
    again.poison();
    cuda::linear_skinny(bf(x), bf(w), bf(out), false, rows, n, k, num_sms(), nullptr);
    cuda::linear_skinny(bf(x), bf(w), bf(again), false, rows, n, k, num_sms(), nullptr);
    sync();
    r.close("y", to_float(out.to_host()), want);
    r.exact("a second run", again.to_host(), out.to_host());
  }
}

// The absorbed MLA projections per head in the model's layouts: W_uk (rows of kv_b [heads, nope + v, lora]) folds
// each head's q_nope into the latent space (batched_gemv_transposed), W_uv unfolds each head's latent output into
// values (batched_gemv; batched_linear_skinny beyond the matrix-vector rows). lora 136 leaves a partial block of
// columns, nope 24 a partial share of rows; 520 a partial 64-deep stage, v 20 a partial column tile.
void batched_gemv_transposed(OpRun& r) {
  const int64_t rows = r["rows"], heads = r["heads"], nope = r["nope"], v = r["v"], lora = r["lora"];
  const int64_t rope = 8, qk = nope + rope, D = lora + rope;
  std::vector<float> kv_b_f, q_f;
  auto kv_b = DeviceArray<Bf16>::from_host(r.random_bf16(heads * (nope + v) * lora, kv_b_f, 0.1f));
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * qk, q_f));
  DeviceArray<Bf16> q_latent(rows * heads * D);
  q_latent.poison();
  const cuda::GemvLayout layout{heads * qk, qk, (nope + v) * lora, heads * D, D, lora};
  cuda::batched_gemv_transposed(bf(q), bf(kv_b), bf(q_latent), heads, rows, lora, nope, layout, nullptr);
  sync();
  std::vector<float> want(rows * heads * D, 0.0f);
  cpu::batched_gemv_transposed(q_f.data(), kv_b_f.data(), want.data(), heads, rows, lora, nope,
                               {heads * qk, qk, (nope + v) * lora, heads * D, D, lora});
  const std::vector<float> all = to_float(q_latent.to_host());
  std::vector<float> got, want_latent;  // the rope tail is not this op's
  for (int64_t i = 0; i < rows * heads; ++i)
    for (int64_t j = 0; j < lora; ++j) got.push_back(all[i * D + j]), want_latent.push_back(want[i * D + j]);
  r.close("latent queries", got, want_latent);
}

void batched_gemv(OpRun& r, bool skinny) {
  const int64_t rows = r["rows"], heads = r["heads"], nope = r["nope"], v = r["v"], lora = r["lora"];
  std::vector<float> kv_b_f, o_f;
  auto kv_b = DeviceArray<Bf16>::from_host(r.random_bf16(heads * (nope + v) * lora, kv_b_f, 0.05f));
  auto o_latent = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * lora, o_f));
  DeviceArray<Bf16> attn(rows * heads * v);
  attn.poison();
  const cuda::GemvLayout layout{heads * lora, lora, (nope + v) * lora, heads * v, v, lora};
  if (skinny)
    cuda::batched_linear_skinny(bf(o_latent), bf(kv_b) + nope * lora, bf(attn), heads, rows, v, lora, layout,
                                num_sms(), nullptr);
  else
    cuda::batched_gemv(bf(o_latent), bf(kv_b) + nope * lora, bf(attn), heads, rows, v, lora, layout, nullptr);
  sync();
  std::vector<float> want(rows * heads * v);
  cpu::batched_gemv(o_f.data(), kv_b_f.data() + nope * lora, want.data(), heads, rows, v, lora,
                    {heads * lora, lora, (nope + v) * lora, heads * v, v, lora});
  r.close("values", to_float(attn.to_host()), want);
}

void argmax_rows(OpRun& r) {
  const int64_t rows = r["rows"], vocab = r["vocab"];
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = normal(r.rng());
  logits[5 * vocab + 7] = logits[5 * vocab + 9] = 100.0f;  // a tie: the lower index wins
  auto d = DeviceArray<float>::from_host(logits);
  DeviceArray<int32_t> out(rows);
  DeviceArray<float> probability(rows);
  out.poison();
  probability.poison();
  cuda::argmax_rows(d.data(), rows, vocab, out.data(), probability.data(), nullptr);
  sync();
  std::vector<int32_t> want(rows);
  std::vector<float> want_probability(rows);
  cpu::argmax_rows(logits.data(), rows, vocab, want.data(), want_probability.data());  // kernels/cpu/sampling.h
  r.exact("tokens", out.to_host(), want);
  // The confidence of the MTP drafter's drafts: float partial sums against the CPU's double sum.
  const std::vector<float> got_probability = probability.to_host();
  for (int64_t i = 0; i < rows; ++i)
    EXPECT_NEAR(got_probability[i], want_probability[i], 1e-5 * want_probability[i] + 1e-7) << "row " << i;
  // Without the probabilities, the same tokens.
  out.poison();
  cuda::argmax_rows(d.data(), rows, vocab, out.data(), nullptr, nullptr);
  sync();
  r.exact("tokens without probabilities", out.to_host(), want);
}

// Overlapped scheduling: a step's inputs take its predecessor's sampled tokens on the device; the other inputs
// stay as uploaded.
void scatter_sampled_tokens(OpRun& r) {
  const int64_t inputs = r["inputs"], sampled_rows = r["sampled"], count = r["count"];
  std::vector<int32_t> tokens(inputs), sampled(sampled_rows), targets;
  for (int32_t& t : tokens) t = static_cast<int32_t>(r.rng()() % 1000);
  for (int32_t& t : sampled) t = static_cast<int32_t>(1000 + r.rng()() % 1000);
  std::vector<int64_t> order(inputs);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), r.rng());
  for (int64_t i = 0; i < count; ++i)  // distinct inputs, any sampled row
    targets.insert(targets.end(), {static_cast<int32_t>(order[i]), static_cast<int32_t>(r.rng()() % sampled_rows)});
  auto d_tokens = DeviceArray<int32_t>::from_host(tokens);
  auto d_sampled = DeviceArray<int32_t>::from_host(sampled);
  auto d_targets = DeviceArray<int32_t>::from_host(targets);
  cuda::scatter_sampled_tokens(d_sampled.data(), d_targets.data(), count, d_tokens.data(), nullptr);
  sync();
  cpu::scatter_sampled_tokens(sampled.data(), targets.data(), count, tokens.data());
  r.exact("tokens", d_tokens.to_host(), tokens);
}

// The fingerprint of --logits-hashes: the CPU's value, and a change of one bit in one entry changes it.
void logits_row_hashes(OpRun& r) {
  const int64_t rows = r["rows"], vocab = r["vocab"];
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = normal(r.rng());
  logits[1 * vocab + 3] = std::bit_cast<float>(std::bit_cast<uint32_t>(logits[0 * vocab + 3]) ^ 1u);
  for (int64_t v = 0; v < vocab; ++v) logits[2 * vocab + v] = logits[v];  // row 2 = row 0, row 1 one bit off
  auto d = DeviceArray<float>::from_host(logits);
  DeviceArray<uint64_t> out(rows);
  out.poison();
  cuda::logits_row_hashes(d.data(), rows, vocab, out.data(), nullptr);
  sync();
  std::vector<uint64_t> want(rows);
  cpu::logits_row_hashes(logits.data(), rows, vocab, want.data());
  r.exact("hashes", out.to_host(), want);
  EXPECT_EQ(want[0], want[2]);
  EXPECT_NE(want[0], want[1]);
}

// Against cpu::sample_rows on the same logits and Philox streams. Both sum the kept probabilities in different
// orders, so a draw landing within rounding of a boundary may pick the neighbour: at least 99.5% of draws must
// agree, and every greedy, top_k = 1 and tiny-top_p draw exactly.
void sample_rows(OpRun& r) {
  const int64_t rows = r["rows"], vocab = r["vocab"];
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = 2.0f * normal(r.rng());
  std::vector<cuda::SamplingRow> params(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const int kind = static_cast<int>(i % 6);
    params[i] = {kind == 0 ? 0.0f : 0.7f + 0.1f * static_cast<float>(i % 5),
                 kind == 3 ? 0.9f : kind == 5 ? 1e-6f : 1.0f, kind == 2 ? 50 : kind == 4 ? 1 : 0,
                 1000u + static_cast<uint64_t>(i), i * 7};
  }
  auto d_logits = DeviceArray<float>::from_host(logits);
  DeviceArray<uint8_t> d_params(rows * sizeof(cuda::SamplingRow));
  DI_CUDA_CHECK(cudaMemcpy(d_params.data(), params.data(), rows * sizeof(cuda::SamplingRow), cudaMemcpyHostToDevice));
  DeviceArray<int32_t> out(rows);
  out.poison();
  DeviceArray<uint8_t> workspace(cuda::sample_workspace_bytes(rows, vocab));
  cuda::sample_rows(d_logits.data(), rows, vocab, reinterpret_cast<const cuda::SamplingRow*>(d_params.data()),
                    out.data(), workspace.data(), workspace.size(), nullptr);
  sync();
  const std::vector<int32_t> got = out.to_host();
  std::vector<cpu::SamplingRow> cpu_params(rows);
  for (int64_t i = 0; i < rows; ++i)
    cpu_params[i] = {params[i].temperature, params[i].top_p, params[i].top_k, params[i].seed, params[i].position};
  std::vector<int32_t> want(rows);
  cpu::sample_rows(logits.data(), rows, vocab, cpu_params.data(), want.data());
  std::vector<int32_t> got_exact, want_exact;
  int64_t agree = 0;
  for (int64_t i = 0; i < rows; ++i) {
    agree += got[i] == want[i];
    if (i % 6 == 0 || i % 6 == 4 || i % 6 == 5) got_exact.push_back(got[i]), want_exact.push_back(want[i]);
  }
  r.exact("greedy, top-1 and tiny top-p draws", got_exact, want_exact);
  EXPECT_GE(agree, rows * 995 / 1000) << agree << " of " << rows << " draws agree";
}

// Structured output's masks: random masks (a row unmasked, a row all but one token masked) applied in place on the
// device and on the CPU — the same logits bit for bit (the vocabulary not a multiple of 32).
void apply_token_bitmask(OpRun& r) {
  const int64_t rows = r["rows"], vocab = r["vocab"], words = (vocab + 31) / 32;
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = normal(r.rng());
  std::vector<uint32_t> masks(rows * words);
  for (uint32_t& m : masks) m = static_cast<uint32_t>(r.rng()());
  std::vector<uint8_t> masked(rows, 1);
  masked[1] = 0;
  std::fill_n(masks.begin() + 2 * words, words, 0u);
  masks[2 * words + 3] = 1u << 5;
  auto d_logits = DeviceArray<float>::from_host(logits);
  auto d_masks = DeviceArray<uint32_t>::from_host(masks);
  auto d_masked = DeviceArray<uint8_t>::from_host(masked);
  cuda::apply_token_bitmask(d_logits.data(), rows, vocab, d_masks.data(), words, d_masked.data(), nullptr);
  sync();
  cpu::apply_token_bitmask(logits.data(), rows, vocab, masks.data(), words, masked.data());
  r.exact("masked logits", d_logits.to_host(), logits);
}

}  // namespace

void add_dense_rows(OpTable& t) {
  t.add("embedding", "bf16", {{"vocab", 1000}, {"dim", 320}, {"tokens", 77}}, kExact, embedding);
  for (const auto& [row_bytes, stride] :
       std::initializer_list<std::pair<int64_t, int64_t>>{{256, 264}, {8, 264}, {264, 264}, {1, 3}})
    t.add("gather_byte_rows", "bytes", {{"table_rows", 5000}, {"row_bytes", row_bytes}, {"rows", 700}, {"stride", stride}},
          kExact, gather_byte_rows);
  for (int64_t width : {1, 33, 300})
    t.add("gather_int32_rows", "i32", {{"table_rows", 513}, {"width", width}, {"rows", 300}}, kExact,
          gather_int32_rows);
  for (int64_t dim : {2048, 7168, 200, 2050, 9216})
    for (int64_t with_add : {1, 0})
      t.add("add_rms_norm", "bf16", {{"rows", 37}, {"dim", dim}, {"add", with_add}}, kBf16, add_rms_norm);
  t.add("rms_norm", "bf16", {{"rows", 29}, {"dim", 512}, {"stride", 576}}, kBf16, rms_norm_strided_in_place);
  for (int64_t tensor = 0; tensor < static_cast<int64_t>(dummy_tensors().size()); ++tensor) {
    t.add("fill_dummy_f32", "f32", {{"tensor", tensor}}, 1e-6, [](OpRun& r) { fill_dummy(r, true); });
    t.add("fill_dummy_bf16", "bf16", {{"tensor", tensor}}, 4e-3, [](OpRun& r) { fill_dummy(r, false); });  // rounding
  }
  for (int64_t width : {576, 1536})
    t.add("write_kv_entries", "bf16",
          {{"tokens", 70}, {"dim", 576}, {"src_stride", 600}, {"slots", 640}, {"cache_stride", width}}, kExact,
        kv_entries);
  t.add("bf16_to_f32", "f32", {{"n", 10007}}, kExact, bf16_to_f32);
  t.add("f32_to_bf16", "bf16", {{"n", 10007}}, kExact, f32_to_bf16);
  t.add("add_f32_into_bf16", "bf16", {{"n", 10007}}, kBf16, add_f32_into_bf16);
  for (int64_t interleaved : {1, 0})
    t.add("rope", "bf16",
          {{"tokens", 50}, {"heads", 16}, {"row", 192}, {"nope", 128}, {"rope", 64}, {"interleaved", interleaved}},
          kBf16, rope);
  for (int64_t limit : {0, 500})
    t.add("silu_mul", "bf16", {{"rows", 33}, {"inter", 1408}, {"limit_milli", limit}}, kBf16, silu_mul);
  for (int64_t f32 : {0, 1})
    t.add("linear_bf16", f32 ? "f32" : "bf16", {{"m", 45}, {"n", 1024}, {"k", 2048}, {"f32_out", f32}},
          f32 ? kF32 : kBf16, linear_bf16);
  t.add("gemm_bf16", "bf16", {{"tokens", 9}, {"heads", 16}, {"nope", 128}, {"latent", 512}}, kBf16, gemm_bf16);
  for (int64_t rows = 1; rows <= cuda::kLinearGemvMaxRows; ++rows) {
    const Sizes gemv = {{"rows", rows}, {"hidden", 264}, {"inter", 200}};
    for (int64_t limit : {0, 500}) {
      Sizes s = gemv;
      s.emplace_back("limit_milli", limit);
      t.add("swiglu_gemv", "bf16", s, kBf16, swiglu_gemv);
    }
    for (int64_t f32 : {0, 1}) {
      Sizes s = gemv;
      s.emplace_back("f32_out", f32);
      t.add("linear_gemv", f32 ? "f32" : "bf16", s, f32 ? kF32 : kBf16, linear_gemv);
    }
    const Sizes heads = {{"rows", rows}, {"heads", 3}, {"nope", 24}, {"v", 16}, {"lora", 136}};
    t.add("batched_gemv_transposed", "bf16", heads, kBf16, batched_gemv_transposed);
    t.add("batched_gemv", "bf16", heads, kBf16, [](OpRun& r) { batched_gemv(r, false); });
  }
  for (auto [n, k] : {std::pair<int64_t, int64_t>{200, 264}, {198, 2048}, {2048, 1408}})
    for (int64_t rows : {3, 16, 17, 33, 48, 64})
      for (int64_t f32 : {0, 1})
        t.add("linear_skinny", f32 ? "f32" : "bf16", {{"rows", rows}, {"n", n}, {"k", k}, {"f32_out", f32}},
              f32 ? kF32 : kBf16, linear_skinny);
  for (int64_t rows : {3, 17, 64})
    t.add("batched_linear_skinny", "bf16", {{"rows", rows}, {"heads", 3}, {"nope", 8}, {"v", 20}, {"lora", 520}},
          kBf16, [](OpRun& r) { batched_gemv(r, true); });
  t.add("argmax_rows", "i32", {{"rows", 19}, {"vocab", 102400}}, kExact, argmax_rows);
  for (auto [inputs, sampled, count] : {std::tuple<int64_t, int64_t, int64_t>{300, 256, 256}, {7, 3, 3}, {5, 4, 0}})
    t.add("scatter_sampled_tokens", "i32", {{"inputs", inputs}, {"sampled", sampled}, {"count", count}}, kExact,
          scatter_sampled_tokens);
  for (int64_t vocab : {129280, 100})
    t.add("logits_row_hashes", "u64", {{"rows", 5}, {"vocab", vocab}}, kExact, logits_row_hashes);
  t.add("sample_rows", "i32", {{"rows", 512}, {"vocab", 5000}}, kExact, sample_rows);
  t.add("apply_token_bitmask", "f32", {{"rows", 7}, {"vocab", 129280 - 3}}, kExact, apply_token_bitmask);
}

}  // namespace deepinfer::op_test
