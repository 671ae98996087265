// Every CUDA op against its CPU form, table-driven (as ggml's test-backend-ops): one row per op x sizes x output
// dtype, each with the tolerance its outputs are held to. The CPU forms live in kernels/cpu under the CUDA
// launchers' names (ops.h, router.h, mla_attention.h, moe.h, sampling.h). A row draws
// fresh random inputs (never zeros), rounds them to bf16 before the CPU form sees them, so a tolerance covers
// only the op's own rounding and summation order, and poisons every output first, so unwritten elements show as
// NaN. Tolerances are relative L2 errors: bf16 outputs 1e-2, fp32 outputs 2e-3, indices and copies exact; rows
// whose op fuses others are held to the unfused ops' bits. Every row is skipped when no GPU is visible (CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/hyper_connections.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/router.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/sparse_attention.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/fake_quant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/hyper_connections.cuh"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/mla_prepare.cuh"
#include "kernels/cuda/moe_gemv.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/moe_permute.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "src/core/device.h"
#include "src/core/device_array.h"
#include "src/core/tensor.h"
#include "src/model/weights.h"

namespace deepinfer {
namespace {

constexpr double kBf16 = 1e-2;
constexpr double kF32 = 2e-3;
constexpr double kExact = 0.0;

using Bf16 = uint16_t;  // host view of __nv_bfloat16
using Sizes = std::vector<std::pair<std::string, int64_t>>;

__nv_bfloat16* bf(DeviceArray<Bf16>& a) { return reinterpret_cast<__nv_bfloat16*>(a.data()); }
const __nv_bfloat16* bf(const DeviceArray<Bf16>& a) { return reinterpret_cast<const __nv_bfloat16*>(a.data()); }

std::vector<float> to_float(const std::vector<Bf16>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}
std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;  // unwritten (poisoned) or overflowed
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0.0 ? (diff == 0.0 ? 0.0 : INFINITY) : std::sqrt(diff / norm);
}
void sync() {
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
}
int num_sms() {
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// What one row's run sees: its sizes, a generator, a cuBLAS handle, and the checks it reports.
class OpRun {
 public:
  OpRun(const Sizes& sizes, double tolerance) : sizes_(sizes), tolerance_(tolerance) {}
  ~OpRun() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  int64_t operator[](const std::string& name) const {
    for (const auto& [n, v] : sizes_)
      if (n == name) return v;
    ADD_FAILURE() << "the row has no size '" << name << "'";
    return 0;
  }
  std::mt19937& rng() { return rng_; }
  // Random bf16 values (as bf16 bits) and their exact fp32 values.
  std::vector<Bf16> random_bf16(size_t n, std::vector<float>& exact, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<Bf16> bits(n);
    exact.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16(normal(rng_));
      exact[i] = bf16_to_float(bits[i]);
    }
    return bits;
  }
  cublasHandle_t blas() {
    if (handle_ == nullptr) {
      EXPECT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasSetStream(handle_, cudaStreamPerThread), CUBLAS_STATUS_SUCCESS);
    }
    return handle_;
  }
  // got against the CPU form's want, at the row's tolerance.
  void close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    const double e = rel_error(got, want);
    if (tolerance_ == kExact) EXPECT_EQ(e, 0.0) << what;
    else EXPECT_LT(e, tolerance_) << what << ": relative error " << e << ", tolerance " << tolerance_;
  }
  // Bit for bit, whatever the row's tolerance (indices, copies, fused ops against their parts, reruns).
  template <class T>
  void exact(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0) << what << ": not the same bits";
  }

 private:
  const Sizes& sizes_;
  double tolerance_;
  std::mt19937 rng_{std::random_device{}()};
  cublasHandle_t handle_ = nullptr;
};

struct OpCase {
  std::string op;     // the CUDA launcher (kernels/cuda) and its CPU form's name
  std::string dtype;  // of the compared output
  Sizes sizes;
  double tolerance;
  std::function<void(OpRun&)> run;
};

// ---------------------------------------------------------------------------------------------------------------
// The rows' runs, one per op, reading their sizes from the row.

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

// Dummy weights generated on the device equal the host's (both draw N(0,1) in double precision from the same
// counter-based generator; libm and CUDA may differ in the last bit of log/cos, hence 1e-6 in fp32, not 0).
const std::vector<std::pair<std::string, Shape>> kDummyTensors = {
    {"model.layers.3.mlp.experts.7.up_proj.weight", {64, 300}},
    {"model.norm.weight", {4096}},
    {"model.layers.1.mlp.gate.e_score_correction_bias", {256}}};

void fill_dummy(OpRun& r, bool f32) {
  const auto& [name, shape] = kDummyTensors[r["tensor"]];
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
  const int64_t tokens = r["tokens"], dim = r["dim"], src_stride = r["src_stride"], slots_total = r["slots"];
  std::vector<float> src_f;
  auto src = DeviceArray<Bf16>::from_host(r.random_bf16(tokens * src_stride, src_f));
  std::vector<int64_t> all(slots_total);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), r.rng());
  const std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
  auto d_slots = DeviceArray<int64_t>::from_host(slots);
  DeviceArray<Bf16> cache(slots_total * dim), out(tokens * dim);
  out.poison();
  cuda::write_kv_entries(bf(src), src_stride, d_slots.data(), tokens, dim, bf(cache), nullptr);
  cuda::gather_kv_entries(bf(cache), d_slots.data(), tokens, dim, bf(out), nullptr);
  sync();
  std::vector<float> cache_f(slots_total * dim), want(tokens * dim);
  cpu::write_kv_entries(src_f.data(), src_stride, slots.data(), tokens, dim, cache_f.data());
  cpu::gather_kv_entries(cache_f.data(), slots.data(), tokens, dim, want.data());
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
  cuda::write_kv_entries(bf(kv), entry, d_slots.data(), tokens, entry, bf(cache), nullptr);
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

void silu_mul(OpRun& r) {
  const int64_t rows = r["rows"], inter = r["inter"];
  std::vector<float> gu_f;
  auto gu = DeviceArray<Bf16>::from_host(r.random_bf16(rows * 2 * inter, gu_f));
  DeviceArray<Bf16> out(rows * inter);
  out.poison();
  cuda::silu_mul(bf(gu), bf(out), rows, inter, nullptr);
  sync();
  std::vector<float> want(rows * inter);
  for (int64_t i = 0; i < rows; ++i)
    cpu::silu_mul(gu_f.data() + i * 2 * inter, gu_f.data() + i * 2 * inter + inter, want.data() + i * inter, inter);
  r.close("activations", to_float(out.to_host()), want);
}

// cuBLAS's Linear, bf16 or fp32 out.
void linear_bf16(OpRun& r) {
  const int64_t m = r["m"], n = r["n"], k = r["k"];
  const bool f32 = r["f32_out"] != 0;
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(m * k, x_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(n * k, w_f, 0.02f));
  std::vector<float> want(m * n);
  cpu::linear(x_f.data(), w_f.data(), nullptr, want.data(), m, n, k);
  DeviceArray<Bf16> y(m * n);
  DeviceArray<float> y32(m * n);
  y.poison();
  y32.poison();
  ASSERT_EQ(cuda::linear_bf16(r.blas(), bf(x), bf(w), f32 ? static_cast<void*>(y32.data()) : y.data(), f32, m, n, k),
            CUBLAS_STATUS_SUCCESS);
  sync();
  r.close("y", f32 ? y32.to_host() : to_float(y.to_host()), want);
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

void moe_pad_rows(OpRun& r) {
  const int64_t experts = 5, hidden = r["hidden"], padded = r["padded"];
  const std::vector<int32_t> offsets = {0, 3, 3, 10, 12, 17};  // 3, 0, 7, 2, 5 rows
  const int64_t rows = offsets.back();
  std::vector<float> x_f;
  auto x_perm = DeviceArray<Bf16>::from_host(r.random_bf16(rows * hidden, x_f));
  std::vector<int32_t> row_of(rows);
  for (int64_t j = 0; j < rows; ++j) row_of[j] = static_cast<int32_t>((j * 5 + 2) % rows);  // a permutation
  auto d_row_of = DeviceArray<int32_t>::from_host(row_of);
  auto d_offsets = DeviceArray<int32_t>::from_host(offsets);
  std::vector<int32_t> padded_offsets(experts);
  for (int64_t e = 0; e < experts; ++e) padded_offsets[e] = static_cast<int32_t>(e * padded);
  auto d_padded = DeviceArray<int32_t>::from_host(padded_offsets);
  DeviceArray<Bf16> x_pad(experts * padded * hidden);
  x_pad.poison();
  cuda::moe_pad_rows(bf(x_perm), d_offsets.data(), d_padded.data(), experts, rows, hidden, bf(x_pad), d_row_of.data(),
                     nullptr);
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
  for (int64_t j = 0; j < rows; ++j) {
    int64_t e = 0;
    while (offsets[e + 1] <= row_of[j]) ++e;
    want_row_of[j] = static_cast<int32_t>(e * padded + row_of[j] - offsets[e]);
  }
  r.exact("every row at its padded place", got, want);
  r.exact("row_of remapped", d_row_of.to_host(), want_row_of);
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
  cuda::moe_gemv_gate_up(bf(x), d_ids.data(), tokens, top_k, hidden, inter, bf(gate_up), bf(act), nullptr);
  cuda::moe_gemv_down(bf(act), d_ids.data(), d_w.data(), tokens, top_k, hidden, inter, bf(down), bf(out), nullptr);
  sync();
  std::vector<float> want = base_f;
  cpu::moe_experts(x_f.data(), ids.data(), weights.data(), tokens, top_k, hidden, inter, gu_f.data(), down_f.data(),
                   want.data());
  r.close("routed sums", to_float(out.to_host()), want);
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
                                        bf(gate_up), bf(down), bf(act), bf(y_perm), sync_words.data(), num_sms(),
                                        nullptr),
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
                   want.data());
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
  cuda::swiglu_gemv(bf(in.x), bf(in.gate_up), bf(act), rows, I, H, nullptr);
  sync();
  std::vector<float> gate(rows * I), up(rows * I), want(rows * I);
  cpu::linear(in.x_f.data(), in.gu_f.data(), nullptr, gate.data(), rows, I, H);
  cpu::linear(in.x_f.data(), in.gu_f.data() + I * H, nullptr, up.data(), rows, I, H);
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
  DeviceArray<Bf16> y(rows * n);
  DeviceArray<float> y32(rows * n);
  y.poison();
  y32.poison();
  cuda::linear_gemv(x, w, f32 ? static_cast<void*>(y32.data()) : y.data(), f32, rows, n, k, nullptr);
  sync();
  std::vector<float> want(rows * n);
  cpu::linear(f32 ? act_f.data() : in.x_f.data(), f32 ? in.down_f.data() : in.gu_f.data() + I * H, nullptr,
              want.data(), rows, n, k);
  r.close("y", f32 ? y32.to_host() : to_float(y.to_host()), want);
}

// The decode-batch Linear (k split over a block cluster) at row counts that fill 1..4 MMA row tiles and leave
// partial ones: n off the 64-column tile (200) and off 4-column groups (198), k off the 64-deep stage (264). Its
// sums meet in a fixed order, so two runs agree bit for bit.
void linear_skinny(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], k = r["k"];
  const bool f32 = r["f32_out"] != 0;
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(rows * k, x_f));
  auto w = DeviceArray<Bf16>::from_host(r.random_bf16(n * k, w_f, 0.05f));
  std::vector<float> want(rows * n);
  cpu::linear(x_f.data(), w_f.data(), nullptr, want.data(), rows, n, k);
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

// A paged latent cache shared by the decode rows: lengths across block edges (1, 63, 64, 65, 300, 511, 17),
// blocks shuffled.
struct DecodeInputs {
  static constexpr int64_t kHeads = 16, kLatent = 512, kRope = 64, kBlocks = 40, kMaxBlocks = 8;
  std::vector<int32_t> lens = {1, 63, 64, 65, 300, 511, 17}, table;
  std::vector<float> q_f, cache_f;
  DeviceArray<Bf16> q, cache;
  DeviceArray<int32_t> d_table, d_lens;
  float scale = 0.07f;
  explicit DecodeInputs(OpRun& r) {
    const auto batch = static_cast<int64_t>(lens.size());
    const int64_t dim = kLatent + kRope;
    q = DeviceArray<Bf16>::from_host(r.random_bf16(batch * kHeads * dim, q_f, 0.1f));
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
    std::vector<float> out(rows * kHeads * kLatent);
    cpu::mla_decode_attention(q_f.data(), cache_f.data(), table.data(), kMaxBlocks, lens.data(), rows, kHeads, kLatent,
                              kRope, scale, out.data());
    return out;
  }
};

// All seven sequences or the first three (up to four the kernel loads its first tiles before the wait), split
// 1, 4 or 16 ways.
void mla_decode_attention(OpRun& r) {
  DecodeInputs in(r);
  const int64_t rows = r["rows"], splits = r["splits"], H = DecodeInputs::kHeads, L = DecodeInputs::kLatent;
  DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(rows, H, L, splits) / sizeof(float));
  DeviceArray<Bf16> out(rows * H * L);
  out.poison();
  cuda::mla_decode_attention(bf(in.q), bf(in.cache), in.d_table.data(), DecodeInputs::kMaxBlocks, in.d_lens.data(),
                             rows, H, L, DecodeInputs::kRope, in.scale, splits, workspace.data(), bf(out), nullptr);
  sync();
  r.close("latent outputs", to_float(out.to_host()), in.cpu_attention(rows));
}

// With W_uv folded into the combine: 40 rows a head (a partial group of 32), heads 2 rows of padding apart in the
// weight; against the CPU attention rounded to bf16 (as the unfused path stores it), then W_uv.
void mla_decode_attention_projected(OpRun& r) {
  DecodeInputs in(r);
  const int64_t splits = r["splits"], H = DecodeInputs::kHeads, L = DecodeInputs::kLatent;
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
// tiles of the tensor-core kernel; its rows two 64-row tiles, with partial and idle warps).
void mla_prefill_attention(OpRun& r) {
  const int64_t heads = r["heads"], nope = r["nope"], rope = r["rope"], v_dim = r["v"];
  const std::vector<int64_t> cached = {20, 0, 90}, fresh = {30, 45, 70};
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
  auto pe = DeviceArray<Bf16>::from_host(r.random_bf16(tk * rope, pe_f));
  auto d_seq = DeviceArray<int32_t>::from_host(q_seq);
  auto d_pos = DeviceArray<int32_t>::from_host(q_pos);
  auto d_cu = DeviceArray<int32_t>::from_host(cu_k);
  DeviceArray<Bf16> out(tq * heads * v_dim);
  out.poison();
  const float scale = 0.072f;
  const std::vector<int32_t> tiles = cuda::mla_prefill_tiles(q_seq, nope, rope, v_dim);
  auto d_tiles = DeviceArray<int32_t>::from_host(tiles);
  cuda::mla_prefill_attention(bf(q), bf(kv), bf(pe), rope, d_seq.data(), d_pos.data(), d_cu.data(), d_tiles.data(),
                              static_cast<int64_t>(tiles.size()) - 1, heads, nope, rope, v_dim, scale, bf(out), nullptr);
  sync();
  std::vector<float> want(tq * heads * v_dim);
  cpu::mla_prefill_attention(q_f.data(), kv_f.data(), pe_f.data(), rope, q_seq.data(), q_pos.data(), cu_k.data(), tq,
                             heads, nope, rope, v_dim, scale, want.data());
  r.close("outputs", to_float(out.to_host()), want);
}

void argmax_rows(OpRun& r) {
  const int64_t rows = r["rows"], vocab = r["vocab"];
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = normal(r.rng());
  logits[5 * vocab + 7] = logits[5 * vocab + 9] = 100.0f;  // a tie: the lower index wins
  auto d = DeviceArray<float>::from_host(logits);
  DeviceArray<int32_t> out(rows);
  out.poison();
  cuda::argmax_rows(d.data(), rows, vocab, out.data(), nullptr);
  sync();
  std::vector<int32_t> want(rows);
  cpu::argmax_rows(logits.data(), rows, vocab, want.data());  // kernels/cpu/sampling.h
  r.exact("tokens", out.to_host(), want);
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

// V4.1's attention core: rows at positions short of the window (3, 40), across it (130, 700), and with up to
// `extras` selected compressed entries each (random picks, ascending), the cache entries `stride` apart.
void sparse_window_attention(OpRun& r) {
  const int64_t heads = r["heads"], hd = r["head_dim"], window = r["window"], max_extras = r["extras"];
  const int64_t stride = 2 * hd, num_blocks = 40, max_blocks = 12, num_extra = 600;
  const std::vector<int32_t> positions = {3, 40, 130, 700, 64, 127};
  const auto rows = static_cast<int64_t>(positions.size());
  std::vector<float> q_f, cache_f, extra_f, sinks(heads);
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * hd, q_f, 0.05f));
  auto cache = DeviceArray<Bf16>::from_host(r.random_bf16(num_blocks * 64 * stride, cache_f));
  auto extra = DeviceArray<Bf16>::from_host(r.random_bf16(num_extra * hd, extra_f));
  for (float& v : sinks) v = std::normal_distribution<float>(0.0f, 2.0f)(r.rng());
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), r.rng());
  std::vector<int32_t> table(rows * max_blocks), offsets = {0}, ids;
  for (int64_t i = 0; i < rows * max_blocks; ++i) table[i] = blocks[(i * 7) % num_blocks];
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = max_extras == 0 ? 0 : static_cast<int64_t>(r.rng()() % (max_extras + 1));
    std::vector<int32_t> pick(num_extra);
    std::iota(pick.begin(), pick.end(), 0);
    std::shuffle(pick.begin(), pick.end(), r.rng());
    pick.resize(n);
    std::sort(pick.begin(), pick.end());
    ids.insert(ids.end(), pick.begin(), pick.end());
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  auto d_table = DeviceArray<int32_t>::from_host(table), d_pos = DeviceArray<int32_t>::from_host(positions);
  auto d_offsets = DeviceArray<int32_t>::from_host(offsets), d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_sinks = DeviceArray<float>::from_host(sinks);
  DeviceArray<Bf16> out(rows * heads * hd);
  out.poison();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const cuda::SparseWindowKeys keys{bf(cache), stride, d_table.data(), max_blocks, d_pos.data(), window, bf(extra),
                                    max_extras > 0 ? d_offsets.data() : nullptr, d_ids.data()};
  cuda::sparse_window_attention(bf(q), keys, d_sinks.data(), rows, heads, hd, scale, bf(out), nullptr);
  sync();
  std::vector<float> want(rows * heads * hd);
  const cpu::SparseWindowKeys cpu_keys{cache_f.data(), stride, table.data(), max_blocks, positions.data(), window,
                                       extra_f.data(), max_extras > 0 ? offsets.data() : nullptr, ids.data()};
  cpu::sparse_window_attention(q_f.data(), cpu_keys, sinks.data(), rows, heads, hd, scale, want.data());
  r.close("outputs", to_float(out.to_host()), want);
}

// V4.1's gated pooling of a KV source's compressor inputs, [K=V | kv | gate] entries from a shuffled paged cache.
void compress_pool(OpRun& r) {
  const int64_t groups = r["groups"], ratio = r["ratio"], hd = r["head_dim"], stride = 3 * hd;
  const int64_t positions = groups * ratio, table_len = (positions + 63) / 64, num_blocks = table_len + 7;
  std::vector<float> cache_f;
  auto cache = DeviceArray<Bf16>::from_host(r.random_bf16(num_blocks * 64 * stride, cache_f));
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), r.rng());
  const std::vector<int32_t> table(blocks.begin(), blocks.begin() + table_len);
  auto d_table = DeviceArray<int32_t>::from_host(table);
  DeviceArray<Bf16> out(groups * hd);
  out.poison();
  cuda::compress_pool(bf(cache), stride, d_table.data(), groups, ratio, hd, hd, 2 * hd, bf(out), nullptr);
  sync();
  std::vector<float> want(groups * hd);
  cpu::compress_pool(cache_f.data(), stride, table.data(), groups, ratio, hd, hd, 2 * hd, want.data());
  r.close("pooled entries", to_float(out.to_host()), want);
}

// V4.1's indexer scores: relu'd per-head dot products weighted per head, summed; rows seeing all, some or none of
// the compressed keys.
void indexer_scores(OpRun& r) {
  const int64_t rows = r["rows"], heads = r["heads"], dim = r["dim"], num_keys = r["keys"];
  std::vector<float> q_f, k_f, weights(rows * heads);
  auto q = DeviceArray<Bf16>::from_host(r.random_bf16(rows * heads * dim, q_f));
  auto keys = DeviceArray<Bf16>::from_host(r.random_bf16(num_keys * dim, k_f));
  for (float& w : weights) w = std::normal_distribution<float>()(r.rng());
  std::vector<int32_t> visible(rows);
  for (int64_t i = 0; i < rows; ++i) visible[i] = static_cast<int32_t>(i == 0 ? 0 : i == 1 ? num_keys : r.rng()() % num_keys);
  auto d_weights = DeviceArray<float>::from_host(weights);
  auto d_visible = DeviceArray<int32_t>::from_host(visible);
  DeviceArray<float> scores(rows * num_keys);
  scores.poison();
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(dim)), heads_scale = 1.0f / std::sqrt(float(heads));
  cuda::indexer_scores(bf(q), d_weights.data(), bf(keys), d_visible.data(), rows, heads, dim, num_keys, softmax_scale,
                       heads_scale, scores.data(), nullptr);
  sync();
  std::vector<float> want(rows * num_keys);
  cpu::indexer_scores(q_f.data(), weights.data(), k_f.data(), visible.data(), rows, heads, dim, num_keys,
                      softmax_scale, heads_scale, want.data());
  // The -inf entries must match exactly; the finite ones at the row's tolerance.
  std::vector<float> got = scores.to_host(), got_finite, want_finite;
  std::vector<int32_t> got_masked, want_masked;
  for (size_t i = 0; i < want.size(); ++i) {
    got_masked.push_back(std::isinf(got[i]) ? 1 : 0);
    want_masked.push_back(std::isinf(want[i]) ? 1 : 0);
    if (!std::isinf(want[i])) got_finite.push_back(got[i]), want_finite.push_back(want[i]);
  }
  r.exact("which entries are masked", got_masked, want_masked);
  r.close("scores", got_finite, want_finite);
}

// V4.1's in-forward quantisation, bf16 rows in place against the CPU on the same values: bit for bit (the formats'
// code is one for both, kernels/fp_formats.h). Values over a wide range of magnitudes, blocks of tiny ones included.
void fake_quant(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], block = r["block"], format = r["format"];
  std::vector<float> x_f;
  std::vector<Bf16> bits = r.random_bf16(rows * n, x_f);
  for (int64_t i = 0; i < rows * n; ++i) {  // magnitudes from 2^-20 to 2^10, a block in eight at 2^-12
    const int shift = static_cast<int>(r.rng()() % 31) - 20;
    const float v = (i / block) % 8 == 3 ? std::ldexp(x_f[i], -12) : std::ldexp(x_f[i], shift);
    bits[i] = float_to_bf16(v);
    x_f[i] = bf16_to_float(bits[i]);
  }
  auto x = DeviceArray<Bf16>::from_host(bits);
  if (format == 8) cuda::fake_quant_fp8(bf(x), rows, n, block, nullptr);
  else cuda::fake_quant_fp4(bf(x), rows, n, block, format == 4, nullptr);
  sync();
  if (format == 8) cpu::fake_quant_fp8(x_f.data(), rows, n, block);
  else cpu::fake_quant_fp4(x_f.data(), rows, n, block, format == 4);
  r.exact("dequantised values", to_float(x.to_host()), x_f);
}

// The indexer's top-k: rows of random scores rounded to a coarse grid (many ties at the threshold), their tails
// masked to -inf at random points, one row with fewer finite scores than k and one with none.
void select_topk(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], k = r["k"];
  std::vector<float> scores(rows * n);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t visible = i == 0 ? n : i == 1 ? k / 2 : i == 2 ? 0 : static_cast<int64_t>(r.rng()() % (n + 1));
    for (int64_t g = 0; g < n; ++g)
      scores[i * n + g] = g < visible ? std::round(std::normal_distribution<float>()(r.rng()) * 8.0f) / 8.0f
                                      : -INFINITY;
  }
  auto d_scores = DeviceArray<float>::from_host(scores);
  DeviceArray<int32_t> ids(rows * k), counts(rows);
  ids.poison();
  counts.poison();
  cuda::select_topk(d_scores.data(), rows, n, k, ids.data(), counts.data(), nullptr);
  sync();
  std::vector<int32_t> want_ids(rows * k, 0), want_counts(rows);
  cpu::select_topk(scores.data(), rows, n, k, want_ids.data(), want_counts.data());
  const std::vector<int32_t> got_ids = ids.to_host(), got_counts = counts.to_host();
  r.exact("counts", got_counts, want_counts);
  std::vector<int32_t> got_kept, want_kept;  // the written ids only (the rest of each row is not the op's)
  for (int64_t i = 0; i < rows; ++i)
    for (int32_t j = 0; j < std::min(want_counts[i], got_counts[i]); ++j)
      got_kept.push_back(got_ids[i * k + j]), want_kept.push_back(want_ids[i * k + j]);
  r.exact("kept indices, ascending", got_kept, want_kept);
}

// The candidate source's block top-k: scores on a coarse grid (ties between blocks), tails masked at random
// visible counts (one row seeing nothing, one everything).
void candidate_blocks(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], bs = r["block_size"], k = r["topk_blocks"];
  const int64_t num_blocks = (n + bs - 1) / bs;
  std::vector<float> scores(rows * n);
  std::vector<int32_t> visible(rows);
  for (int64_t i = 0; i < rows; ++i) {
    visible[i] = static_cast<int32_t>(i == 0 ? 0 : i == 1 ? n : r.rng()() % (n + 1));
    for (int64_t g = 0; g < n; ++g)
      scores[i * n + g] = g < visible[i] ? std::round(std::normal_distribution<float>()(r.rng()) * 4.0f) / 4.0f
                                         : -INFINITY;
  }
  auto d_scores = DeviceArray<float>::from_host(scores);
  auto d_visible = DeviceArray<int32_t>::from_host(visible);
  DeviceArray<float> block_scores(rows * num_blocks);
  DeviceArray<int32_t> block_ids(rows * k), block_counts(rows);
  DeviceArray<uint8_t> mask(rows * n);
  mask.poison();
  cuda::candidate_blocks(d_scores.data(), d_visible.data(), rows, n, k, bs, block_scores.data(), block_ids.data(),
                         block_counts.data(), mask.data(), nullptr);
  sync();
  std::vector<uint8_t> want(rows * n);
  cpu::candidate_blocks(scores.data(), visible.data(), rows, n, k, bs, want.data());
  r.exact("candidate masks", mask.to_host(), want);
}

// ---------------------------------------------------------------------------------------------------------------
// The table.

std::vector<OpCase> op_table() {
  std::vector<OpCase> t;
  auto add = [&](std::string op, std::string dtype, Sizes sizes, double tolerance, std::function<void(OpRun&)> run) {
    t.push_back({std::move(op), std::move(dtype), std::move(sizes), tolerance, std::move(run)});
  };
  add("embedding", "bf16", {{"vocab", 1000}, {"dim", 320}, {"tokens", 77}}, kExact, embedding);
  for (int64_t dim : {2048, 7168, 200, 2050, 9216})
    for (int64_t with_add : {1, 0})
      add("add_rms_norm", "bf16", {{"rows", 37}, {"dim", dim}, {"add", with_add}}, kBf16, add_rms_norm);
  add("rms_norm", "bf16", {{"rows", 29}, {"dim", 512}, {"stride", 576}}, kBf16, rms_norm_strided_in_place);
  for (auto [top_k, hidden] : {std::pair<int64_t, int64_t>{6, 2048}, {8, 7168}, {2, 200}})
    add("moe_unpermute_add_rms_norm", "bf16", {{"tokens", 5}, {"top_k", top_k}, {"hidden", hidden}}, kExact,
        moe_unpermute_add_rms_norm);
  for (int64_t tensor = 0; tensor < static_cast<int64_t>(kDummyTensors.size()); ++tensor) {
    add("fill_dummy_f32", "f32", {{"tensor", tensor}}, 1e-6, [](OpRun& r) { fill_dummy(r, true); });
    add("fill_dummy_bf16", "bf16", {{"tensor", tensor}}, 4e-3, [](OpRun& r) { fill_dummy(r, false); });  // rounding
  }
  add("write_kv_entries", "bf16", {{"tokens", 70}, {"dim", 576}, {"src_stride", 600}, {"slots", 640}}, kExact,
      kv_entries);
  add("bf16_to_f32", "f32", {{"n", 10007}}, kExact, bf16_to_f32);
  add("f32_to_bf16", "bf16", {{"n", 10007}}, kExact, f32_to_bf16);
  add("add_f32_into_bf16", "bf16", {{"n", 10007}}, kBf16, add_f32_into_bf16);
  for (int64_t interleaved : {1, 0})
    add("rope", "bf16",
        {{"tokens", 50}, {"heads", 16}, {"row", 192}, {"nope", 128}, {"rope", 64}, {"interleaved", interleaved}},
        kBf16, rope);
  for (int64_t interleaved : {1, 0})
    add("mla_prepare", "bf16",
        {{"tokens", 7}, {"heads", 16}, {"lora", 512}, {"rope", 64}, {"nope", 128}, {"interleaved", interleaved}},
        kExact, mla_prepare);
  add("silu_mul", "bf16", {{"rows", 33}, {"inter", 1408}}, kBf16, silu_mul);
  for (int64_t f32 : {0, 1})
    add("linear_bf16", f32 ? "f32" : "bf16", {{"m", 45}, {"n", 1024}, {"k", 2048}, {"f32_out", f32}},
        f32 ? kF32 : kBf16, linear_bf16);
  add("gemm_bf16", "bf16", {{"tokens", 9}, {"heads", 16}, {"nope", 128}, {"latent", 512}}, kBf16, gemm_bf16);
  for (int64_t version : {2, 3, 41})
    add("route_topk", "f32", {{"tokens", 300}, {"version", version}}, 1e-5, route_topk);
  add("grouped_gemm_bf16", "bf16", {{"tokens", 123}, {"top_k", 6}, {"experts", 64}, {"hidden", 256}, {"inter", 128}},
      kBf16, grouped_gemm_bf16);
  add("chunked_gemm_bf16", "bf16", {{"chunk", 8}, {"n", 48}, {"k", 64}}, kBf16, chunked_gemm_bf16);
  add("moe_pad_rows", "bf16", {{"hidden", 24}, {"padded", 7}}, kExact, moe_pad_rows);
  for (auto [tokens, top_k] : {std::pair<int64_t, int64_t>{1, 6}, {3, 6}, {1, 5}, {2, 19}})
    add("moe_gemv", "bf16", {{"tokens", tokens}, {"top_k", top_k}, {"hidden", 256}, {"inter", 136}}, kBf16, moe_gemv);
  // Shapes off the kernels' tiles (hidden 200 = 3 x 64 + 8, inter 136 = 2 x 64 + 8) with fewer items than blocks;
  // and several items a block (63 passes), so the pipeline runs from item to item inside a block.
  add("moe_grouped_experts", "bf16",
      {{"tokens", 80}, {"experts", 16}, {"used", 12}, {"hidden", 200}, {"inter", 136}}, kBf16, moe_grouped_experts);
  add("moe_grouped_experts", "bf16",
      {{"tokens", 200}, {"experts", 64}, {"used", 60}, {"hidden", 1024}, {"inter", 704}}, kBf16, moe_grouped_experts);
  for (auto [tokens, top_k, experts] : {std::tuple<int64_t, int64_t, int64_t>{1, 6, 64}, {37, 6, 65}, {256, 6, 64},
                                        {682, 6, 65}, {512, 8, 257}, {1024, 4, 16}})
    add("moe_route", "i32", {{"tokens", tokens}, {"top_k", top_k}, {"experts", experts}}, kExact, moe_route);
  for (int64_t rows = 1; rows <= cuda::kLinearGemvMaxRows; ++rows) {
    const Sizes gemv = {{"rows", rows}, {"hidden", 264}, {"inter", 200}};
    add("swiglu_gemv", "bf16", gemv, kBf16, swiglu_gemv);
    for (int64_t f32 : {0, 1}) {
      Sizes s = gemv;
      s.emplace_back("f32_out", f32);
      add("linear_gemv", f32 ? "f32" : "bf16", s, f32 ? kF32 : kBf16, linear_gemv);
    }
    const Sizes heads = {{"rows", rows}, {"heads", 3}, {"nope", 24}, {"v", 16}, {"lora", 136}};
    add("batched_gemv_transposed", "bf16", heads, kBf16, batched_gemv_transposed);
    add("batched_gemv", "bf16", heads, kBf16, [](OpRun& r) { batched_gemv(r, false); });
  }
  for (auto [n, k] : {std::pair<int64_t, int64_t>{200, 264}, {198, 2048}, {2048, 1408}})
    for (int64_t rows : {3, 16, 17, 33, 48, 64})
      for (int64_t f32 : {0, 1})
        add("linear_skinny", f32 ? "f32" : "bf16", {{"rows", rows}, {"n", n}, {"k", k}, {"f32_out", f32}},
            f32 ? kF32 : kBf16, linear_skinny);
  for (int64_t rows : {3, 17, 64})
    add("batched_linear_skinny", "bf16", {{"rows", rows}, {"heads", 3}, {"nope", 8}, {"v", 20}, {"lora", 520}}, kBf16,
        [](OpRun& r) { batched_gemv(r, true); });
  for (int64_t rows : {7, 3})
    for (int64_t splits : {1, 4, 16})
      add("mla_decode_attention", "bf16", {{"rows", rows}, {"splits", splits}}, kBf16, mla_decode_attention);
  for (int64_t splits : {2, 16, 64})
    add("mla_decode_attention_projected", "bf16", {{"splits", splits}}, kBf16, mla_decode_attention_projected);
  add("mla_prefill_attention", "bf16", {{"heads", 8}, {"nope", 128}, {"rope", 64}, {"v", 128}}, kBf16,
      mla_prefill_attention);
  // V4.1-Flash's width (hc 4, hidden 5120) and an odd one; 1, 7 and 64 tokens.
  for (int64_t tokens : {1, 7, 64})
    for (int64_t hidden : {5120, 200}) {
      const Sizes s = {{"tokens", tokens}, {"hc", 4}, {"hidden", hidden}};
      add("hc_flat_rms_norm", "bf16", s, kBf16, hc_flat_rms_norm);
      add("hc_collapse_rms_norm", "bf16", s, kBf16, hc_collapse_rms_norm);
      add("hc_post", "f32", s, kF32, hc_post);
    }
  for (int64_t iters : {1, 20})
    for (int64_t hc : {4, 2})
      add("hc_mixes", "f32", {{"tokens", 300}, {"hc", hc}, {"sinkhorn_iters", iters}}, kF32, hc_mixes);
  // V4.1-Flash: 64 heads of 512, window 128, index top-k 512; and a narrow odd one.
  for (int64_t extras : {0, 512})
    add("sparse_window_attention", "bf16", {{"heads", 64}, {"head_dim", 512}, {"window", 128}, {"extras", extras}},
        kBf16, sparse_window_attention);
  add("sparse_window_attention", "bf16", {{"heads", 3}, {"head_dim", 200}, {"window", 16}, {"extras", 40}}, kBf16,
      sparse_window_attention);
  for (int64_t ratio : {4, 128})
    add("compress_pool", "bf16", {{"groups", 10}, {"ratio", ratio}, {"head_dim", 512}}, kBf16, compress_pool);
  add("compress_pool", "bf16", {{"groups", 3}, {"ratio", 3}, {"head_dim", 200}}, kBf16, compress_pool);
  add("indexer_scores", "f32", {{"rows", 5}, {"heads", 64}, {"dim", 128}, {"keys", 1000}}, kF32, indexer_scores);
  add("indexer_scores", "f32", {{"rows", 4}, {"heads", 3}, {"dim", 72}, {"keys", 70}}, kF32, indexer_scores);
  // format 8: fp8 (window KV, blocks of 32); 4: fp4 with e4m3 scales (compressed KV, 16); 5: fp4 with
  // power-of-two scales (indexer, 32).
  add("fake_quant_fp8", "bf16", {{"rows", 33}, {"n", 512}, {"block", 32}, {"format", 8}}, kExact, fake_quant);
  add("fake_quant_fp4", "bf16", {{"rows", 33}, {"n", 512}, {"block", 16}, {"format", 4}}, kExact, fake_quant);
  add("fake_quant_fp4", "bf16", {{"rows", 65}, {"n", 128}, {"block", 32}, {"format", 5}}, kExact, fake_quant);
  add("select_topk", "i32", {{"rows", 8}, {"n", 5000}, {"k", 512}}, kExact, select_topk);
  add("select_topk", "i32", {{"rows", 8}, {"n", 100}, {"k", 7}}, kExact, select_topk);
  // V4.1-Flash's defaults (blocks of 8, 2,048 of them kept) over 20,000 compressed entries; and smaller ones.
  add("candidate_blocks", "u8", {{"rows", 4}, {"n", 20000}, {"block_size", 8}, {"topk_blocks", 2048}}, kExact,
      candidate_blocks);
  add("candidate_blocks", "u8", {{"rows", 8}, {"n", 2000}, {"block_size", 64}, {"topk_blocks", 16}}, kExact,
      candidate_blocks);
  add("candidate_blocks", "u8", {{"rows", 8}, {"n", 100}, {"block_size", 7}, {"topk_blocks", 3}}, kExact,
      candidate_blocks);
  add("argmax_rows", "i32", {{"rows", 19}, {"vocab", 102400}}, kExact, argmax_rows);
  add("sample_rows", "i32", {{"rows", 512}, {"vocab", 5000}}, kExact, sample_rows);
  return t;
}

const std::vector<OpCase>& table() {
  static const std::vector<OpCase> cases = op_table();
  return cases;
}

class CudaOp : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
    DI_CUDA_CHECK(cudaSetDevice(0));
  }
};

TEST_P(CudaOp, MatchesCpu) {
  const OpCase& c = table()[GetParam()];
  OpRun run(c.sizes, c.tolerance);
  c.run(run);
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  const OpCase& c = table()[info.param];
  std::string name = c.op + "_" + c.dtype;
  for (const auto& [size, value] : c.sizes) name += "_" + size + std::to_string(value);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Table, CudaOp, ::testing::Range<size_t>(0, table().size()), case_name);

}  // namespace
}  // namespace deepinfer
