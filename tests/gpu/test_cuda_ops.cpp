// Every CUDA op against its CPU reference, on fresh random inputs (never zeros), with outputs poisoned
// before each run so that unwritten elements show as NaN. Inputs are rounded to bf16 before the CPU
// reference sees them, so the tolerance covers only the op's own rounding and summation order.
// Tolerances (relative L2 error): bf16 outputs 1e-2, fp32 outputs 2e-3; indices exact.
// Every test is skipped when no GPU is visible (CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/router.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/dummy_init.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/gemm.cuh"
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
#include "src/core/device.h"
#include "src/core/device_array.h"
#include "src/core/tensor.h"
#include "src/engine/sampler.h"
#include "src/model/weights.h"

namespace deepinfer {
namespace {

constexpr double kBf16Tolerance = 1e-2;
constexpr double kF32Tolerance = 2e-3;

using Bf16 = uint16_t;  // host view of __nv_bfloat16

__nv_bfloat16* bf(DeviceArray<Bf16>& a) { return reinterpret_cast<__nv_bfloat16*>(a.data()); }
const __nv_bfloat16* bf(const DeviceArray<Bf16>& a) { return reinterpret_cast<const __nv_bfloat16*>(a.data()); }

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
    DI_CUDA_CHECK(cudaSetDevice(0));
  }
  void TearDown() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  cublasHandle_t handle() {
    if (handle_ == nullptr) {
      EXPECT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasSetStream(handle_, cudaStreamPerThread), CUBLAS_STATUS_SUCCESS);
    }
    return handle_;
  }
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
  // Permute, moe_grouped_mlp and unpermute at this shape against the CPU (defined beside its tests).
  void check_grouped_experts(int64_t tokens, int64_t experts, int64_t used, int64_t hidden, int64_t inter);
  static std::vector<float> to_float(const std::vector<Bf16>& bits) {
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  }
  static double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!std::isfinite(got[i])) return INFINITY;  // unwritten (poisoned) or overflowed
      diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    return std::sqrt(diff / norm);
  }
  // Per-head products against row-major weight rows: y[t, h, i] = x[t, h, :] . w[h * head_stride + i * k ...], for
  // `rows` rows of k values a head (W_uv's shape in the absorbed form).
  static std::vector<float> per_head_rows(const std::vector<float>& x, const float* w, int64_t tokens, int64_t heads,
                                          int64_t rows, int64_t k, int64_t head_stride) {
    std::vector<float> y(tokens * heads * rows);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < rows; ++i) {
          double sum = 0.0;
          for (int64_t j = 0; j < k; ++j) sum += double(x[(t * heads + h) * k + j]) * w[h * head_stride + i * k + j];
          y[(t * heads + h) * rows + i] = static_cast<float>(sum);
        }
    return y;
  }
  static void sync() {
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::mt19937 rng_{std::random_device{}()};
  cublasHandle_t handle_ = nullptr;
};

TEST_F(CudaOps, Embedding) {
  const int64_t vocab = 1000, dim = 320, tokens = 77;
  std::vector<float> table_f;
  auto table = DeviceArray<Bf16>::from_host(random_bf16(vocab * dim, table_f));
  std::vector<int32_t> ids(tokens);
  for (auto& id : ids) id = static_cast<int32_t>(rng_() % vocab);
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  DeviceArray<Bf16> out(tokens * dim);
  out.poison();
  cuda::embedding(bf(table), d_ids.data(), bf(out), tokens, dim, nullptr);
  sync();
  std::vector<float> want(tokens * dim);
  cpu::embedding(table_f.data(), ids.data(), want.data(), tokens, dim);
  EXPECT_EQ(rel_error(to_float(out.to_host()), want), 0.0);
}

// The vectorised kernel (dim a multiple of 8, up to 8,192: 2048, 7168 = four pieces a thread, 200 = fewer pieces
// than threads) and the strided one (2050, 9216), each with and without the residual add.
TEST_F(CudaOps, AddRmsNorm) {
  const int64_t rows = 37;
  for (int64_t dim : {2048, 7168, 200, 2050, 9216}) {
    for (bool add : {true, false}) {
      std::vector<float> x_f, res_f, w_f;
      auto x = DeviceArray<Bf16>::from_host(random_bf16(rows * dim, x_f));
      auto res = DeviceArray<Bf16>::from_host(random_bf16(rows * dim, res_f));
      auto w = DeviceArray<Bf16>::from_host(random_bf16(dim, w_f));
      DeviceArray<Bf16> out(rows * dim);
      out.poison();
      cuda::add_rms_norm(add ? bf(x) : nullptr, bf(res), bf(w), bf(out), rows, dim, 1e-6f, nullptr);
      sync();
      std::vector<float> sum(rows * dim), want(rows * dim);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = add ? bf16_to_float(float_to_bf16(res_f[i] + x_f[i])) : res_f[i];
      cpu::rms_norm(sum.data(), w_f.data(), want.data(), rows, dim, 1e-6f);
      EXPECT_LT(rel_error(to_float(res.to_host()), sum), 1e-6) << dim << (add ? " add" : "");  // updated in place
      EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance) << dim << (add ? " add" : "");
    }
  }
}

// The decode step's last MoE kernel: moe_unpermute then add_rms_norm in one launch, the same bits as the two
// (hidden 7168: a partial last piece round; 200: fewer pieces than threads).
TEST_F(CudaOps, MoeUnpermuteAddRmsNormEqualsItsParts) {
  const int64_t tokens = 5;
  for (const auto& [top_k, hidden] : std::vector<std::pair<int64_t, int64_t>>{{6, 2048}, {8, 7168}, {2, 200}}) {
    ASSERT_TRUE(cuda::moe_unpermute_norm_supports(top_k, hidden));
    const int64_t rows = tokens * top_k;
    std::vector<float> unused;
    auto y_perm = DeviceArray<Bf16>::from_host(random_bf16(rows * hidden, unused));
    auto base = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, unused));
    const std::vector<Bf16> residual_host = random_bf16(tokens * hidden, unused);
    auto norm_weight = DeviceArray<Bf16>::from_host(random_bf16(hidden, unused));
    std::vector<int32_t> row_of(rows);
    std::iota(row_of.begin(), row_of.end(), 0);
    std::shuffle(row_of.begin(), row_of.end(), rng_);
    std::vector<float> weights(rows);
    for (float& w : weights) w = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    auto d_row_of = DeviceArray<int32_t>::from_host(row_of);
    auto d_weights = DeviceArray<float>::from_host(weights);

    auto delta = DeviceArray<Bf16>::from_host(base.to_host());
    auto residual_parts = DeviceArray<Bf16>::from_host(residual_host);
    DeviceArray<Bf16> normed_parts(tokens * hidden);
    cuda::moe_unpermute(bf(y_perm), d_row_of.data(), d_weights.data(), tokens, top_k, hidden, bf(delta), nullptr);
    cuda::add_rms_norm(bf(delta), bf(residual_parts), bf(norm_weight), bf(normed_parts), tokens, hidden, 1e-6f,
                       nullptr);
    auto residual_fused = DeviceArray<Bf16>::from_host(residual_host);
    DeviceArray<Bf16> normed_fused(tokens * hidden);
    normed_fused.poison();
    cuda::moe_unpermute_add_rms_norm(bf(y_perm), d_row_of.data(), d_weights.data(), tokens, top_k, hidden, bf(base),
                                     bf(residual_fused), bf(norm_weight), 1e-6f, bf(normed_fused), nullptr);
    sync();
    const auto same_bits = [](const DeviceArray<Bf16>& a, const DeviceArray<Bf16>& b) {
      const std::vector<Bf16> x = a.to_host(), y = b.to_host();
      return std::memcmp(x.data(), y.data(), x.size() * sizeof(Bf16)) == 0;
    };
    EXPECT_TRUE(same_bits(residual_fused, residual_parts)) << "top-" << top_k << ", hidden " << hidden;
    EXPECT_TRUE(same_bits(normed_fused, normed_parts)) << "top-" << top_k << ", hidden " << hidden;
  }
}

// Dummy weights generated on the device equal the host's (both draw N(0,1) in double precision from the same
// counter-based generator; libm and CUDA may differ in the last bit of log/cos, hence 1e-6, not 0).
TEST_F(CudaOps, DummyInitMatchesHost) {
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"model.layers.3.mlp.experts.7.up_proj.weight", {64, 300}},
           {"model.norm.weight", {4096}},
           {"model.layers.1.mlp.gate.e_score_correction_bias", {256}}}) {
    const Tensor host = make_dummy_tensor(name, shape, 42);
    const std::vector<float> want(host.data<float>(), host.data<float>() + host.numel());
    const DummyRule rule = dummy_rule(name, shape, 42);
    DeviceArray<float> f32(host.numel());
    DeviceArray<Bf16> b16(host.numel());
    f32.poison();
    b16.poison();
    cuda::fill_dummy_f32(f32.data(), host.numel(), rule.key, rule.scale, rule.offset, nullptr);
    cuda::fill_dummy_bf16(bf(b16), host.numel(), rule.key, rule.scale, rule.offset, nullptr);
    sync();
    EXPECT_LT(rel_error(f32.to_host(), want), 1e-6) << name;
    EXPECT_LT(rel_error(to_float(b16.to_host()), want), 4e-3) << name;  // bf16 rounding
  }
}

TEST_F(CudaOps, RmsNormStridedInPlace) {
  const int64_t rows = 29, dim = 512, stride = 576;  // the latent part of [latent | k_pe] rows
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(random_bf16(rows * stride, x_f));
  auto w = DeviceArray<Bf16>::from_host(random_bf16(dim, w_f));
  cuda::rms_norm(bf(x), stride, bf(w), bf(x), stride, rows, dim, 1e-6f, nullptr);
  sync();
  std::vector<float> want = x_f;
  for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x_f.data() + r * stride, w_f.data(), want.data() + r * stride, 1, dim, 1e-6f);
  EXPECT_LT(rel_error(to_float(x.to_host()), want), kBf16Tolerance);
}

TEST_F(CudaOps, KvCacheWriteAndGather) {
  const int64_t tokens = 70, dim = 576, src_stride = 600, slots_total = 64 * 10;
  std::vector<float> src_f;
  auto src = DeviceArray<Bf16>::from_host(random_bf16(tokens * src_stride, src_f));
  std::vector<int64_t> all(slots_total);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng_);
  const std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
  auto d_slots = DeviceArray<int64_t>::from_host(slots);
  DeviceArray<Bf16> cache(slots_total * dim), out(tokens * dim);
  out.poison();
  cuda::write_kv_entries(bf(src), src_stride, d_slots.data(), tokens, dim, bf(cache), nullptr);
  cuda::gather_kv_entries(bf(cache), d_slots.data(), tokens, dim, bf(out), nullptr);
  sync();
  std::vector<float> want(tokens * dim);
  for (int64_t t = 0; t < tokens; ++t) std::copy_n(src_f.data() + t * src_stride, dim, want.data() + t * dim);
  EXPECT_EQ(rel_error(to_float(out.to_host()), want), 0.0);
}

TEST_F(CudaOps, ConvertAndAccumulate) {
  const int64_t n = 10007;
  std::vector<float> y_f, x_f;
  auto y = DeviceArray<Bf16>::from_host(random_bf16(n, y_f));
  random_bf16(n, x_f);
  auto x = DeviceArray<float>::from_host(x_f);
  DeviceArray<float> as_f32(n);
  as_f32.poison();
  cuda::bf16_to_f32(bf(y), as_f32.data(), n, nullptr);
  sync();
  EXPECT_EQ(rel_error(as_f32.to_host(), y_f), 0.0);
  cuda::add_f32_into_bf16(x.data(), bf(y), n, nullptr);
  DeviceArray<Bf16> back(n);
  back.poison();
  cuda::f32_to_bf16(x.data(), bf(back), n, nullptr);
  sync();
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = y_f[i] + x_f[i];
  EXPECT_LT(rel_error(to_float(y.to_host()), sum), kBf16Tolerance);
  EXPECT_EQ(rel_error(to_float(back.to_host()), x_f), 0.0);  // x holds bf16 values: exact round trip
}

TEST_F(CudaOps, RopeBothLayouts) {
  const int64_t tokens = 50, heads = 16, row = 192, nope = 128, rope_dim = 64;
  std::vector<float> inv_freq(rope_dim / 2);
  for (int64_t i = 0; i < rope_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rope_dim) * (i % 3 ? 1.0f : 0.25f);
  auto d_inv = DeviceArray<float>::from_host(inv_freq);
  std::vector<int32_t> positions(tokens);
  for (auto& p : positions) p = static_cast<int32_t>(rng_() % 4000);
  auto d_pos = DeviceArray<int32_t>::from_host(positions);
  for (bool interleaved : {true, false}) {
    std::vector<float> x_f;
    auto x = DeviceArray<Bf16>::from_host(random_bf16(tokens * heads * row, x_f));
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
    EXPECT_LT(rel_error(to_float(x.to_host()), x_f), kBf16Tolerance) << "interleaved " << interleaved;
  }
}

// The fused step between MLA's projections and its attention against the five ops it replaces (each checked
// against the CPU above): bit-identical cache entries, rotated queries and absorbed-query tails; and the same
// with the absorb (batched_gemv_transposed, checked against the CPU below) in its launch.
TEST_F(CudaOps, MlaPrepareEqualsItsParts) {
  const int64_t tokens = 7, heads = 16, lora = 512, rope_dim = 64, nope = 128, entry = lora + rope_dim;
  const int64_t qk = nope + rope_dim, num_slots = 40;
  std::vector<float> inv_freq(rope_dim / 2), unused;
  for (int64_t i = 0; i < rope_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rope_dim);
  auto d_inv = DeviceArray<float>::from_host(inv_freq);
  std::vector<int32_t> positions(tokens);
  std::vector<int64_t> slots(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(rng_() % 4000), slots[t] = (t * 11 + 3) % num_slots;
  auto d_pos = DeviceArray<int32_t>::from_host(positions);
  auto d_slots = DeviceArray<int64_t>::from_host(slots);
  const std::vector<Bf16> kv_bits = random_bf16(tokens * entry, unused), q_bits = random_bf16(tokens * heads * qk, unused);
  auto weight = DeviceArray<Bf16>::from_host(random_bf16(lora, unused));
  const int64_t v_dim = 128;
  auto kv_b = DeviceArray<Bf16>::from_host(random_bf16(heads * (nope + v_dim) * lora, unused, 0.05f));
  for (bool interleaved : {true, false}) {
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
                                    rope_dim * sizeof(Bf16), tokens * heads, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
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
    // With W_uk's absorb in the same launch (mla_prepare_absorb) against the same two launched apart: every bit
    // of the cache, q and q_latent (q_nope is only read, so the absorb may run after the prepare here).
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
    EXPECT_EQ(qkv3.to_host(), qkv.to_host()) << "interleaved " << interleaved;
    EXPECT_EQ(q_latent3.to_host(), q_latent2.to_host()) << "interleaved " << interleaved;
    const std::vector<Bf16> c1 = cache.to_host(), c2 = cache2.to_host(), c3 = cache3.to_host();
    const std::vector<Bf16> l1 = q_latent.to_host(), l2 = q_latent2.to_host();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < entry; ++i) {
        ASSERT_EQ(c1[slots[t] * entry + i], c2[slots[t] * entry + i]) << "token " << t << " entry value " << i;
        ASSERT_EQ(c3[slots[t] * entry + i], c2[slots[t] * entry + i]) << "token " << t << " entry value " << i;
      }
    const std::vector<Bf16> q1 = q.to_host(), after = qkv.to_host();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < heads * qk; ++i)
        ASSERT_EQ(q1[t * heads * qk + i], after[t * row + i]) << "interleaved " << interleaved << ", token " << t;
      for (int64_t i = 0; i < entry; ++i)  // kv itself is only read
        ASSERT_EQ(kv_bits[t * entry + i], after[t * row + heads * qk + i]) << "token " << t;
    }
    for (int64_t r = 0; r < tokens * heads; ++r)
      for (int64_t i = lora; i < entry; ++i) ASSERT_EQ(l1[r * entry + i], l2[r * entry + i]) << "query row " << r;
  }
}

TEST_F(CudaOps, SiluMul) {
  const int64_t rows = 33, inter = 1408;
  std::vector<float> gu_f;
  auto gu = DeviceArray<Bf16>::from_host(random_bf16(rows * 2 * inter, gu_f));
  DeviceArray<Bf16> out(rows * inter);
  out.poison();
  cuda::silu_mul(bf(gu), bf(out), rows, inter, nullptr);
  sync();
  std::vector<float> want(rows * inter);
  for (int64_t r = 0; r < rows; ++r)
    cpu::silu_mul(gu_f.data() + r * 2 * inter, gu_f.data() + r * 2 * inter + inter, want.data() + r * inter, inter);
  EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance);
}

TEST_F(CudaOps, LinearBf16AndFp32Out) {
  const int64_t m = 45, n = 1024, k = 2048;
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(random_bf16(m * k, x_f));
  auto w = DeviceArray<Bf16>::from_host(random_bf16(n * k, w_f, 0.02f));
  std::vector<float> want(m * n);
  cpu::linear(x_f.data(), w_f.data(), nullptr, want.data(), m, n, k);
  DeviceArray<Bf16> y(m * n);
  y.poison();
  ASSERT_EQ(cuda::linear_bf16(handle(), bf(x), bf(w), y.data(), false, m, n, k), CUBLAS_STATUS_SUCCESS);
  DeviceArray<float> y32(m * n);
  y32.poison();
  ASSERT_EQ(cuda::linear_bf16(handle(), bf(x), bf(w), y32.data(), true, m, n, k), CUBLAS_STATUS_SUCCESS);
  sync();
  EXPECT_LT(rel_error(to_float(y.to_host()), want), kBf16Tolerance);
  EXPECT_LT(rel_error(y32.to_host(), want), kF32Tolerance);
}

// The MLA absorption shape: per head, q_latent[T, latent] = q_nope[T, nope] . W_uk[h] ([nope, latent]).
TEST_F(CudaOps, StridedBatchedGemmNoTranspose) {
  const int64_t tokens = 9, heads = 16, nope = 128, v = 128, latent = 512, qk = 192;
  std::vector<float> q_f, w_f;
  auto q = DeviceArray<Bf16>::from_host(random_bf16(tokens * heads * qk, q_f));
  auto w = DeviceArray<Bf16>::from_host(random_bf16(heads * (nope + v) * latent, w_f, 0.05f));
  const int64_t out_row = latent + 64;  // written into a wider [latent | rope] row, as the decode path does
  DeviceArray<Bf16> y(tokens * heads * out_row);
  y.poison();
  ASSERT_EQ(cuda::gemm_bf16(handle(), tokens, latent, nope, {q.data(), heads * qk, qk},
                            {w.data(), latent, (nope + v) * latent}, false, y.data(), heads * out_row, out_row, false,
                            heads),
            CUBLAS_STATUS_SUCCESS);
  sync();
  const std::vector<float> got_all = to_float(y.to_host());
  std::vector<float> got, want;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < latent; ++c) {
        float s = 0;
        for (int64_t n = 0; n < nope; ++n) s += q_f[(t * heads + h) * qk + n] * w_f[(h * (nope + v) + n) * latent + c];
        want.push_back(s);
        got.push_back(got_all[(t * heads + h) * out_row + c]);
      }
  EXPECT_LT(rel_error(got, want), kBf16Tolerance);
}

TEST_F(CudaOps, RouterV2AndV3) {
  const int64_t tokens = 300;
  for (bool v3 : {false, true}) {
    cpu::RouterParams p;
    p.num_experts = v3 ? 256 : 64;
    p.top_k = v3 ? 8 : 6;
    p.num_groups = v3 ? 8 : 4;
    p.topk_groups = v3 ? 4 : 2;
    p.scoring = v3 ? cpu::RouterParams::Scoring::kSigmoid : cpu::RouterParams::Scoring::kSoftmax;
    p.group_score = v3 ? cpu::RouterParams::GroupScore::kTop2Sum : cpu::RouterParams::GroupScore::kMax;
    p.normalize = v3;
    p.scaling = v3 ? 2.5f : 1.0f;
    std::normal_distribution<float> normal;
    std::vector<float> logits(tokens * p.num_experts), bias(p.num_experts);
    for (float& l : logits) l = normal(rng_);
    for (float& b : bias) b = 0.1f * normal(rng_);
    auto d_logits = DeviceArray<float>::from_host(logits);
    auto d_bias = DeviceArray<float>::from_host(bias);
    std::vector<int32_t> want_ids(tokens * p.top_k);
    std::vector<float> want_w(tokens * p.top_k), scratch(2 * p.num_experts + p.num_groups);
    if (v3) p.correction_bias = bias.data();
    cpu::route_topk(logits.data(), tokens, p, want_ids.data(), want_w.data(), scratch.data());
    if (v3) p.correction_bias = d_bias.data();
    DeviceArray<int32_t> ids(tokens * p.top_k);
    DeviceArray<float> w(tokens * p.top_k);
    ids.poison();
    w.poison();
    cuda::route_topk(d_logits.data(), tokens, p, ids.data(), w.data(), nullptr);
    sync();
    EXPECT_EQ(ids.to_host(), want_ids) << (v3 ? "v3" : "v2");
    EXPECT_LT(rel_error(w.to_host(), want_w), 1e-5) << (v3 ? "v3" : "v2");
  }
}

TEST_F(CudaOps, MoePermuteGroupedGemmUnpermute) {
  const int64_t tokens = 123, top_k = 6, experts = 64, hidden = 256, inter = 128;
  std::vector<float> x_f, w_f, base_f;
  auto x = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, x_f));
  auto w = DeviceArray<Bf16>::from_host(random_bf16(experts * inter * hidden, w_f, 0.06f));
  auto out = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, base_f));  // unpermute adds onto it
  std::vector<int32_t> ids(tokens * top_k);
  std::vector<float> weights(tokens * top_k);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng_);
    for (int64_t k = 0; k < top_k; ++k) {
      ids[t * top_k + k] = all[k] % 20;  // crowd 20 experts, leave the rest empty
      weights[t * top_k + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
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
  // Up: [rows, inter] with expert e's weights w[e] ([inter, hidden]); down: reuse w[e]^T as [hidden, inter]
  // is not a Linear layout, so the second GEMM maps back with a transposed copy.
  DeviceArray<uint8_t> pointers(2 * 3 * experts * sizeof(void*));
  void** pointer_ws = reinterpret_cast<void**>(pointers.data());
  ASSERT_EQ(cuda::grouped_gemm_bf16(handle(), bf(x_perm), bf(w), bf(h_perm), host_offsets.data(), experts, inter, hidden,
                                    pointer_ws),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> wt_f(experts * hidden * inter);
  std::vector<Bf16> wt(experts * hidden * inter);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = 0; i < inter; ++i)
      for (int64_t h = 0; h < hidden; ++h) {
        wt_f[(e * hidden + h) * inter + i] = w_f[(e * inter + i) * hidden + h];
        wt[(e * hidden + h) * inter + i] = float_to_bf16(wt_f[(e * hidden + h) * inter + i]);
      }
  auto d_wt = DeviceArray<Bf16>::from_host(wt);
  ASSERT_EQ(cuda::grouped_gemm_bf16(handle(), bf(h_perm), bf(d_wt), bf(y_perm), host_offsets.data(), experts, hidden, inter,
                                    pointer_ws + 3 * experts),
            CUBLAS_STATUS_SUCCESS);
  cuda::moe_unpermute(bf(y_perm), row_of.data(), d_w.data(), tokens, top_k, hidden, bf(out), nullptr);
  sync();
  // Reference: out[t] = base[t] + sum_k w * (W_e^T (W_e x_t)) with the intermediate rounded to bf16 like the GPU.
  std::vector<float> want = base_f, h(inter), y(hidden);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t e = ids[t * top_k + k];
      cpu::linear(x_f.data() + t * hidden, w_f.data() + e * inter * hidden, nullptr, h.data(), 1, inter, hidden);
      for (float& v : h) v = bf16_to_float(float_to_bf16(v));
      cpu::linear(h.data(), wt_f.data() + e * hidden * inter, nullptr, y.data(), 1, hidden, inter);
      cpu::axpy(weights[t * top_k + k], y.data(), want.data() + t * hidden, hidden);
    }
  EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance);
  EXPECT_EQ(host_offsets.back(), rows);
}

// Reference absorbed attention over the same (bf16-valued) cache.
std::vector<float> reference_decode(const std::vector<float>& q, const std::vector<float>& cache,
                                    const std::vector<int32_t>& table, int64_t max_blocks, const std::vector<int32_t>& lens,
                                    int64_t heads, int64_t latent, int64_t rope, float scale) {
  const int64_t dim = latent + rope;
  std::vector<float> out(lens.size() * heads * latent, 0.0f);
  for (size_t b = 0; b < lens.size(); ++b)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> scores(lens[b]);
      for (int64_t j = 0; j < lens[b]; ++j) {
        const float* e = cache.data() + (table[b * max_blocks + j / 64] * 64 + j % 64) * dim;
        float s = 0;
        for (int64_t d = 0; d < dim; ++d) s += q[(b * heads + h) * dim + d] * e[d];
        scores[j] = s * scale;
      }
      cpu::softmax(scores.data(), lens[b]);
      for (int64_t j = 0; j < lens[b]; ++j) {
        const float* e = cache.data() + (table[b * max_blocks + j / 64] * 64 + j % 64) * dim;
        cpu::axpy(scores[j], e, out.data() + (b * heads + h) * latent, latent);
      }
    }
  return out;
}

TEST_F(CudaOps, ChunkedGemmIsOneLinearPerChunk) {
  const int64_t experts = 3, chunk = 8, n = 48, k = 64;
  const std::vector<int32_t> chunk_expert = {0, 0, 2, 1, 2};
  const auto rows = static_cast<int64_t>(chunk_expert.size()) * chunk;
  std::vector<float> x_f, w_f;
  auto x = DeviceArray<Bf16>::from_host(random_bf16(rows * k, x_f));
  auto w = DeviceArray<Bf16>::from_host(random_bf16(experts * n * k, w_f, 0.1f));
  DeviceArray<Bf16> y(rows * n);
  y.poison();
  DeviceArray<uint8_t> pointers(3 * chunk_expert.size() * sizeof(void*));
  ASSERT_EQ(cuda::chunked_gemm_bf16(handle(), bf(x), bf(w), bf(y), chunk_expert, chunk, n, k,
                                    reinterpret_cast<void**>(pointers.data())),
            CUBLAS_STATUS_SUCCESS);
  sync();
  std::vector<float> want(rows * n);
  for (size_t j = 0; j < chunk_expert.size(); ++j)
    cpu::linear(x_f.data() + j * chunk * k, w_f.data() + chunk_expert[j] * n * k, nullptr, want.data() + j * chunk * n,
                chunk, n, k);
  EXPECT_LT(rel_error(to_float(y.to_host()), want), kBf16Tolerance);
}

TEST_F(CudaOps, MoePadRowsKeepsEveryRowAndItsIndex) {
  const int64_t experts = 5, hidden = 24, padded = 7;
  const std::vector<int32_t> offsets = {0, 3, 3, 10, 12, 17};  // 3, 0, 7, 2, 5 rows
  const int64_t rows = offsets.back();
  std::vector<float> x_f;
  auto x_perm = DeviceArray<Bf16>::from_host(random_bf16(rows * hidden, x_f));
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
  const std::vector<float> got = to_float(x_pad.to_host());
  const std::vector<int32_t> remapped = d_row_of.to_host();
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t p = offsets[e]; p < offsets[e + 1]; ++p)
      for (int64_t i = 0; i < hidden; ++i)
        ASSERT_EQ(got[(e * padded + p - offsets[e]) * hidden + i], x_f[p * hidden + i]) << "row " << p;
  for (int64_t j = 0; j < rows; ++j) {
    int64_t e = 0;
    while (offsets[e + 1] <= row_of[j]) ++e;
    EXPECT_EQ(remapped[j], e * padded + row_of[j] - offsets[e]) << "entry " << j;
  }
}

// Routed SwiGLU experts on the CPU: out[t] = base[t] + sum_k w[t, k] * W_down[e] (bf16(silu(W_gate[e] x[t]) *
// (W_up[e] x[t]))), e = ids[t, k], k in order; round_outputs rounds each expert's output to bf16 first (as the
// permuted path stores it). Weights as the CUDA kernels take them: gate_up [E, 2 * inter, hidden], down
// [E, hidden, inter].
struct RoutedExpertsInput {
  const std::vector<float>& x;
  const std::vector<float>& gate_up;
  const std::vector<float>& down;
  const std::vector<int32_t>& ids;
  const std::vector<float>& weights;
  const std::vector<float>& base;
};
std::vector<float> reference_routed_swiglu(const RoutedExpertsInput& in, int64_t top_k, int64_t hidden, int64_t inter,
                                           bool round_outputs) {
  const auto tokens = static_cast<int64_t>(in.ids.size()) / top_k;
  std::vector<float> out = in.base, gate(inter), up(inter), y(hidden);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t e = in.ids[t * top_k + k];
      const float* xt = in.x.data() + t * hidden;
      cpu::linear(xt, in.gate_up.data() + e * 2 * inter * hidden, nullptr, gate.data(), 1, inter, hidden);
      cpu::linear(xt, in.gate_up.data() + (e * 2 * inter + inter) * hidden, nullptr, up.data(), 1, inter, hidden);
      cpu::silu_mul(gate.data(), up.data(), gate.data(), inter);
      for (float& v : gate) v = bf16_to_float(float_to_bf16(v));
      cpu::linear(gate.data(), in.down.data() + e * hidden * inter, nullptr, y.data(), 1, hidden, inter);
      if (round_outputs)
        for (float& v : y) v = bf16_to_float(float_to_bf16(v));
      cpu::axpy(in.weights[t * top_k + k], y.data(), out.data() + t * hidden, hidden);
    }
  return out;
}

// One token (its own load shape: more loads in flight, fewer rows a warp) and three; top 6, top 5 (the last
// expert of a down row without a pair) and top 19 (ten pairs a down row).
TEST_F(CudaOps, MoeGemvSmallBatch) {
  for (const auto& [tokens, top_k] : {std::pair<int64_t, int64_t>{1, 6}, {3, 6}, {1, 5}, {2, 19}}) {
    const int64_t experts = 16 + top_k, hidden = 256, inter = 136;
    std::vector<float> x_f, gu_f, down_f, base_f;
    auto x = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, x_f));
    auto gate_up = DeviceArray<Bf16>::from_host(random_bf16(experts * 2 * inter * hidden, gu_f, 0.06f));
    auto down = DeviceArray<Bf16>::from_host(random_bf16(experts * hidden * inter, down_f, 0.08f));
    auto out = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, base_f));  // the sum adds onto it
    std::vector<int32_t> ids(tokens * top_k);
    std::vector<float> weights(tokens * top_k);
    for (int64_t i = 0; i < tokens * top_k; ++i) {
      ids[i] = static_cast<int32_t>((i * 7 + 3) % experts);
      weights[i] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    }
    auto d_ids = DeviceArray<int32_t>::from_host(ids);
    auto d_w = DeviceArray<float>::from_host(weights);
    DeviceArray<Bf16> act(tokens * top_k * inter);
    act.poison();
    cuda::moe_gemv_gate_up(bf(x), d_ids.data(), tokens, top_k, hidden, inter, bf(gate_up), bf(act), nullptr);
    cuda::moe_gemv_down(bf(act), d_ids.data(), d_w.data(), tokens, top_k, hidden, inter, bf(down), bf(out), nullptr);
    sync();
    const std::vector<float> want = reference_routed_swiglu({x_f, gu_f, down_f, ids, weights, base_f}, top_k, hidden,
                                                           inter, false);
    EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance) << tokens << " tokens, top " << top_k;
  }
}

// The small-batch Linear and SwiGLU kernels at every row count they take, bf16 and fp32 outputs, k off the
// 4 x 32-piece batch (k = 264).
TEST_F(CudaOps, LinearAndSwigluGemv) {
  const int64_t hidden = 264, inter = 200;
  std::vector<float> x_f, gu_f, down_f;
  auto x = DeviceArray<Bf16>::from_host(random_bf16(cuda::kLinearGemvMaxRows * hidden, x_f));
  auto gate_up = DeviceArray<Bf16>::from_host(random_bf16(2 * inter * hidden, gu_f, 0.06f));
  auto down = DeviceArray<Bf16>::from_host(random_bf16(hidden * inter, down_f, 0.08f));
  for (int64_t rows = 1; rows <= cuda::kLinearGemvMaxRows; ++rows) {
    DeviceArray<Bf16> act(rows * inter);
    DeviceArray<float> out(rows * hidden);
    act.poison();
    out.poison();
    cuda::swiglu_gemv(bf(x), bf(gate_up), bf(act), rows, inter, hidden, nullptr);
    cuda::linear_gemv(bf(act), bf(down), out.data(), true, rows, hidden, inter, nullptr);
    DeviceArray<Bf16> up_only(rows * inter);
    up_only.poison();
    cuda::linear_gemv(bf(x), bf(gate_up) + inter * hidden, bf(up_only), false, rows, inter, hidden, nullptr);
    sync();
    std::vector<float> want_act(rows * inter), want_up(rows * inter), want(rows * hidden), gate(inter);
    for (int64_t t = 0; t < rows; ++t) {
      cpu::linear(x_f.data() + t * hidden, gu_f.data(), nullptr, gate.data(), 1, inter, hidden);
      cpu::linear(x_f.data() + t * hidden, gu_f.data() + inter * hidden, nullptr, want_up.data() + t * inter, 1, inter,
                  hidden);
      cpu::silu_mul(gate.data(), want_up.data() + t * inter, want_act.data() + t * inter, inter);
    }
    const std::vector<float> got_act = to_float(act.to_host());  // the down projection's own input
    for (int64_t t = 0; t < rows; ++t)
      cpu::linear(got_act.data() + t * inter, down_f.data(), nullptr, want.data() + t * hidden, 1, hidden, inter);
    EXPECT_LT(rel_error(got_act, want_act), kBf16Tolerance) << rows << " rows";
    EXPECT_LT(rel_error(to_float(up_only.to_host()), want_up), kBf16Tolerance) << rows << " rows";
    EXPECT_LT(rel_error(out.to_host(), want), kF32Tolerance) << rows << " rows";
  }
}

// The decode-batch Linear (k split over a block cluster) at row counts that fill 1..4 MMA row tiles and leave
// partial ones, bf16 and fp32 outputs: n off the 64-column tile (200) and off 4-column groups (198), k off the
// 64-deep stage (264), and splits of 2 and 8 blocks. Its sums meet in a fixed order, so two runs agree bit for
// bit.
TEST_F(CudaOps, LinearSkinny) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const std::tuple<int64_t, int64_t> shapes[] = {{200, 264}, {198, 2048}, {2048, 1408}};
  for (const auto& [n, k] : shapes) {
    std::vector<float> x_f, w_f;
    auto x = DeviceArray<Bf16>::from_host(random_bf16(cuda::kLinearSkinnyMaxRows * k, x_f));
    auto w = DeviceArray<Bf16>::from_host(random_bf16(n * k, w_f, 0.05f));
    for (int64_t rows : {3, 16, 17, 33, 48, 64}) {
      DeviceArray<Bf16> out(rows * n), again(rows * n);
      DeviceArray<float> out32(rows * n);
      out.poison();
      again.poison();
      out32.poison();
      cuda::linear_skinny(bf(x), bf(w), bf(out), false, rows, n, k, sms, nullptr);
      cuda::linear_skinny(bf(x), bf(w), bf(again), false, rows, n, k, sms, nullptr);
      cuda::linear_skinny(bf(x), bf(w), out32.data(), true, rows, n, k, sms, nullptr);
      sync();
      std::vector<float> want(rows * n);
      cpu::linear(x_f.data(), w_f.data(), nullptr, want.data(), rows, n, k);
      const std::string where = std::to_string(rows) + " x " + std::to_string(n) + " x " + std::to_string(k);
      EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance) << where;
      EXPECT_LT(rel_error(out32.to_host(), want), kF32Tolerance) << where;
      EXPECT_EQ(out.to_host(), again.to_host()) << where;
    }
  }
}

// The absorbed MLA projections per head at every row count they take, in the model's layouts: W_uk (rows of kv_b
// [heads, nope + v, lora]) folds each head's q_nope into the latent space, W_uv unfolds each head's latent output
// into values. lora = 136 leaves a partial block of columns; nope = 24 a partial share of rows.
TEST_F(CudaOps, BatchedGemvAbsorbedProjections) {
  const int64_t heads = 3, nope = 24, rope = 8, v = 16, lora = 136, qk = nope + rope, D = lora + rope;
  std::vector<float> kv_b_f, q_f, o_f;
  auto kv_b = DeviceArray<Bf16>::from_host(random_bf16(heads * (nope + v) * lora, kv_b_f, 0.1f));
  auto q = DeviceArray<Bf16>::from_host(random_bf16(cuda::kLinearGemvMaxRows * heads * qk, q_f));
  auto o_latent = DeviceArray<Bf16>::from_host(random_bf16(cuda::kLinearGemvMaxRows * heads * lora, o_f));
  for (int64_t rows = 1; rows <= cuda::kLinearGemvMaxRows; ++rows) {
    DeviceArray<Bf16> q_latent(rows * heads * D), attn(rows * heads * v);
    q_latent.poison();
    attn.poison();
    cuda::batched_gemv_transposed(bf(q), bf(kv_b), bf(q_latent), heads, rows, lora, nope,
                                  {heads * qk, qk, (nope + v) * lora, heads * D, D, lora}, nullptr);
    cuda::batched_gemv(bf(o_latent), bf(kv_b) + nope * lora, bf(attn), heads, rows, v, lora,
                       {heads * lora, lora, (nope + v) * lora, heads * v, v, lora}, nullptr);
    sync();
    std::vector<float> want_latent(rows * heads * lora), got_latent(rows * heads * lora), want_attn(rows * heads * v);
    const std::vector<float> latent_all = to_float(q_latent.to_host());
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const float* w_head = kv_b_f.data() + h * (nope + v) * lora;
        for (int64_t j = 0; j < lora; ++j) {
          double sum = 0.0;
          for (int64_t n = 0; n < nope; ++n) sum += double(q_f[(t * heads + h) * qk + n]) * w_head[n * lora + j];
          want_latent[(t * heads + h) * lora + j] = static_cast<float>(sum);
          got_latent[(t * heads + h) * lora + j] = latent_all[(t * heads + h) * D + j];  // the rope tail is not ours
        }
        for (int64_t i = 0; i < v; ++i) {
          double sum = 0.0;
          for (int64_t j = 0; j < lora; ++j)
            sum += double(o_f[(t * heads + h) * lora + j]) * w_head[(nope + i) * lora + j];
          want_attn[(t * heads + h) * v + i] = static_cast<float>(sum);
        }
      }
    EXPECT_LT(rel_error(got_latent, want_latent), kBf16Tolerance) << rows << " rows";
    EXPECT_LT(rel_error(to_float(attn.to_host()), want_attn), kBf16Tolerance) << rows << " rows";
  }
}

// W_uv's per-head products at decode batches beyond the matrix-vector kernel (batched_linear_skinny), in the
// model's strided layout (rows of kv_b [heads, nope + v, lora]): lora = 520 leaves a partial 64-deep stage and
// splits k over a cluster, v = 20 a partial column tile.
TEST_F(CudaOps, BatchedLinearSkinnyUnabsorb) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t heads = 3, nope = 8, v = 20, lora = 520;
  std::vector<float> kv_b_f, o_f;
  auto kv_b = DeviceArray<Bf16>::from_host(random_bf16(heads * (nope + v) * lora, kv_b_f, 0.05f));
  auto o_latent = DeviceArray<Bf16>::from_host(random_bf16(cuda::kLinearSkinnyMaxRows * heads * lora, o_f));
  for (int64_t rows : {3, 17, 64}) {
    DeviceArray<Bf16> attn(rows * heads * v);
    attn.poison();
    cuda::batched_linear_skinny(bf(o_latent), bf(kv_b) + nope * lora, bf(attn), heads, rows, v, lora,
                                {heads * lora, lora, (nope + v) * lora, heads * v, v, lora}, sms, nullptr);
    sync();
    const std::vector<float> want =
        per_head_rows(o_f, kv_b_f.data() + nope * lora, rows, heads, v, lora, (nope + v) * lora);
    EXPECT_LT(rel_error(to_float(attn.to_host()), want), kBf16Tolerance) << rows << " rows";
  }
}

// moe_route against moe_permute (a stable radix sort): the same offsets and row_of, and token_of_row the inverse
// of row_of. Up to the 4,096-pair limit (four chunks of the single block), with empty experts, and expert counts
// not a multiple of 32 (65: the expert-parallel extra id).
TEST_F(CudaOps, MoeRouteEqualsPermute) {
  for (auto [tokens, top_k, experts] : {std::tuple<int64_t, int64_t, int64_t>{1, 6, 64}, {37, 6, 65}, {256, 6, 64},
                                        {682, 6, 65}, {512, 8, 257}, {1024, 4, 16}}) {
    const int64_t n = tokens * top_k, hidden = 8;
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i)  // skewed: low experts more often, the top fifth never
      ids[i] = static_cast<int32_t>(std::min<int64_t>(
          std::uniform_int_distribution<int64_t>(0, experts * 4 / 5 - 1)(rng_),
          std::uniform_int_distribution<int64_t>(0, experts * 4 / 5 - 1)(rng_)));
    std::vector<float> x_f;
    auto x = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, x_f));
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
    const std::string at = std::to_string(n) + " pairs, " + std::to_string(experts) + " experts";
    EXPECT_EQ(offsets.to_host(), want_offsets.to_host()) << at;
    const std::vector<int32_t> got_row_of = row_of.to_host(), tokens_of = token_of_row.to_host();
    EXPECT_EQ(got_row_of, want_row_of.to_host()) << at;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_GE(got_row_of[i], 0) << at;
      ASSERT_LT(got_row_of[i], n) << at;
      ASSERT_EQ(tokens_of[got_row_of[i]], i / top_k) << at << ", pair " << i;
    }
  }
}

// The decode path above 64 pairs: route, the grouped expert kernels, unpermute, against the CPU.
// Expert 0 is chosen by every token (more rows than one 64-row pass when tokens > 64), experts from `used` on by
// none.
void CudaOps::check_grouped_experts(int64_t tokens, int64_t experts, int64_t used, int64_t hidden, int64_t inter) {
  const int64_t top_k = 6, rows = tokens * top_k;
  std::vector<float> x_f, gu_f, down_f, base_f;
  auto x = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, x_f));
  auto gate_up = DeviceArray<Bf16>::from_host(random_bf16(experts * 2 * inter * hidden, gu_f, 0.06f));
  auto down = DeviceArray<Bf16>::from_host(random_bf16(experts * hidden * inter, down_f, 0.08f));
  auto out = DeviceArray<Bf16>::from_host(random_bf16(tokens * hidden, base_f));  // unpermute adds onto it
  std::vector<int32_t> ids(rows);
  std::vector<float> weights(rows);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> others(used - 1);
    std::iota(others.begin(), others.end(), 1);
    std::shuffle(others.begin(), others.end(), rng_);
    for (int64_t k = 0; k < top_k; ++k) {
      ids[t * top_k + k] = k == t % top_k ? 0 : others[k];
      weights[t * top_k + k] = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    }
  }
  auto d_ids = DeviceArray<int32_t>::from_host(ids);
  auto d_w = DeviceArray<float>::from_host(weights);
  DeviceArray<Bf16> act(rows * inter), y_perm(rows * hidden);
  DeviceArray<int32_t> row_of(rows), token_of_row(rows), offsets(experts + 1);
  act.poison();
  y_perm.poison();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  cuda::moe_route(d_ids.data(), tokens, top_k, experts, row_of.data(), token_of_row.data(), offsets.data(), nullptr);
  auto sync_words = DeviceArray<int32_t>::from_host(std::vector<int32_t>(cuda::moe_grouped_sync_ints(experts), 0));
  const std::vector<float> want = reference_routed_swiglu({x_f, gu_f, down_f, ids, weights, base_f}, top_k, hidden,
                                                         inter, true);
  // Twice on the same sync words: the first launch must leave them as the second needs them (zero), and the
  // items' order among blocks differs from launch to launch while the result must not.
  std::vector<Bf16> first_y;
  for (int launch = 0; launch < 2; ++launch) {
    SCOPED_TRACE(launch == 0 ? "first launch" : "second launch");
    y_perm.poison();
    ASSERT_EQ(cuda::moe_grouped_experts(bf(x), token_of_row.data(), offsets.data(), experts, hidden, inter,
                                        bf(gate_up), bf(down), bf(act), bf(y_perm), sync_words.data(), sms, nullptr),
              cudaSuccess);
    sync();
    const std::vector<Bf16> got_y = y_perm.to_host();
    if (launch == 0) first_y = got_y;
    else EXPECT_EQ(std::memcmp(got_y.data(), first_y.data(), got_y.size() * sizeof(Bf16)), 0);
    EXPECT_EQ(sync_words.to_host(), std::vector<int32_t>(sync_words.size(), 0));
  }
  cuda::moe_unpermute(bf(y_perm), row_of.data(), d_w.data(), tokens, top_k, hidden, bf(out), nullptr);
  sync();
  ASSERT_EQ(offsets.to_host()[1], tokens);
  EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance)
      << tokens << " tokens, " << experts << " experts, hidden " << hidden << ", inter " << inter;
}

// Shapes off the kernels' tiles (hidden 200 = 3 x 64 + 8, inter 136 = 2 x 64 + 8), expert 0 in two passes,
// experts 12..15 empty: fewer items than blocks.
TEST_F(CudaOps, MoeGroupedDeviceOffsets) { check_grouped_experts(80, 16, 12, 200, 136); }

// Several items a block (63 passes: about 700 gate/up and 500 down items on 2 blocks an SM), so the pipeline runs
// from item to item inside a block and from gate/up items to down items; expert 0 in four passes (its down items
// wait for all four passes' act rows), experts 60..63 empty.
TEST_F(CudaOps, MoeGroupedManyItemsABlock) { check_grouped_experts(200, 64, 60, 1024, 704); }

TEST_F(CudaOps, MlaDecodeAbsorbedPagedSplitKv) {
  const int64_t heads = 16, latent = 512, rope = 64, dim = latent + rope, num_blocks = 40, max_blocks = 8;
  const std::vector<int32_t> lens = {1, 63, 64, 65, 300, 511, 17};
  const auto batch = static_cast<int64_t>(lens.size());
  std::vector<float> q_f, cache_f;
  auto q = DeviceArray<Bf16>::from_host(random_bf16(batch * heads * dim, q_f, 0.1f));
  auto cache = DeviceArray<Bf16>::from_host(random_bf16(num_blocks * 64 * dim, cache_f));
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng_);
  std::vector<int32_t> table(batch * max_blocks);
  for (int64_t i = 0; i < batch * max_blocks; ++i) table[i] = blocks[i % num_blocks];
  auto d_table = DeviceArray<int32_t>::from_host(table);
  auto d_lens = DeviceArray<int32_t>::from_host(lens);
  const float scale = 0.07f;
  const std::vector<float> want = reference_decode(q_f, cache_f, table, max_blocks, lens, heads, latent, rope, scale);
  // All sequences, and the first three alone (up to four the kernel loads its first tiles before the wait).
  for (int64_t rows : {batch, int64_t{3}}) {
    const std::vector<float> want_rows(want.begin(), want.begin() + rows * heads * latent);
    for (int64_t splits : {1, 4, 16}) {
      DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(rows, heads, latent, splits) / sizeof(float));
      DeviceArray<Bf16> out(rows * heads * latent);
      out.poison();
      cuda::mla_decode_attention(bf(q), bf(cache), d_table.data(), max_blocks, d_lens.data(), rows, heads, latent,
                                 rope, scale, splits, workspace.data(), bf(out), nullptr);
      sync();
      EXPECT_LT(rel_error(to_float(out.to_host()), want_rows), kBf16Tolerance) << rows << " rows, " << splits
                                                                                << " splits";
    }
  }
  // With W_uv folded into the combine: 40 rows a head (a partial group of 32), heads 2 rows of padding apart in
  // the weight; against the reference output rounded to bf16 (as the unfused path stores it) times W_uv.
  const int64_t rows = 40, head_stride = (rows + 2) * latent;
  std::vector<float> w_f;
  auto w_uv = DeviceArray<Bf16>::from_host(random_bf16(heads * head_stride, w_f, 0.05f));
  std::vector<float> want_bf16(want.size());
  for (size_t i = 0; i < want.size(); ++i) want_bf16[i] = bf16_to_float(float_to_bf16(want[i]));
  const std::vector<float> want_attn = per_head_rows(want_bf16, w_f.data(), batch, heads, rows, latent, head_stride);
  for (int64_t splits : {2, 16, 64}) {
    ASSERT_TRUE(cuda::mla_decode_projected_supports(latent, rope, splits));
    DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(batch, heads, latent, splits) / sizeof(float));
    DeviceArray<Bf16> attn(batch * heads * rows);
    attn.poison();
    cuda::mla_decode_attention_projected(bf(q), bf(cache), d_table.data(), max_blocks, d_lens.data(), batch, heads,
                                         latent, rope, scale, splits, workspace.data(), {bf(w_uv), rows, head_stride},
                                         bf(attn), nullptr);
    sync();
    EXPECT_LT(rel_error(to_float(attn.to_host()), want_attn), kBf16Tolerance) << splits << " splits, W_uv folded in";
  }
}

TEST_F(CudaOps, MlaPrefillCausalVarlen) {
  const int64_t heads = 8, nope = 128, rope = 64, v_dim = 128;
  // Three sequences: 30 new tokens after 20 cached, 45 from scratch, and 70 after 90 cached (keys span several
  // 64-key tiles of the tensor-core kernel; its rows two 64-row tiles, with partial and idle warps).
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
  auto q = DeviceArray<Bf16>::from_host(random_bf16(tq * heads * (nope + rope), q_f, 0.2f));
  auto kv = DeviceArray<Bf16>::from_host(random_bf16(tk * heads * (nope + v_dim), kv_f));
  auto pe = DeviceArray<Bf16>::from_host(random_bf16(tk * rope, pe_f));
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
  std::vector<float> want(tq * heads * v_dim, 0.0f);
  for (int64_t r = 0; r < tq; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> scores(q_pos[r] + 1);
      for (int64_t j = 0; j <= q_pos[r]; ++j) {
        const int64_t key = cu_k[q_seq[r]] + j;
        float s = 0;
        for (int64_t d = 0; d < nope; ++d) s += q_f[(r * heads + h) * (nope + rope) + d] * kv_f[(key * heads + h) * (nope + v_dim) + d];
        for (int64_t d = 0; d < rope; ++d) s += q_f[(r * heads + h) * (nope + rope) + nope + d] * pe_f[key * rope + d];
        scores[j] = s * scale;
      }
      cpu::softmax(scores.data(), q_pos[r] + 1);
      for (int64_t j = 0; j <= q_pos[r]; ++j)
        cpu::axpy(scores[j], kv_f.data() + ((cu_k[q_seq[r]] + j) * heads + h) * (nope + v_dim) + nope,
                  want.data() + (r * heads + h) * v_dim, v_dim);
    }
  EXPECT_LT(rel_error(to_float(out.to_host()), want), kBf16Tolerance);
}

TEST_F(CudaOps, ArgmaxRows) {
  const int64_t rows = 19, vocab = 102400;
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = normal(rng_);
  logits[5 * vocab + 7] = logits[5 * vocab + 9] = 100.0f;  // a tie: the lower index wins
  auto d = DeviceArray<float>::from_host(logits);
  DeviceArray<int32_t> out(rows);
  out.poison();
  cuda::argmax_rows(d.data(), rows, vocab, out.data(), nullptr);
  sync();
  const std::vector<int32_t> got = out.to_host();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    EXPECT_EQ(got[r], std::max_element(row, row + vocab) - row) << "row " << r;
  }
}

// Against engine/sampler.cpp on the same logits and Philox streams. Both sum the kept probabilities in
// different orders, so a draw landing within rounding of a boundary may pick the neighbour: at least 99.5%
// of draws must agree, and every greedy, top_k = 1 and tiny-top_p draw exactly.
TEST_F(CudaOps, SampleRowsMatchesCpuSampler) {
  const int64_t rows = 512, vocab = 5000;
  std::normal_distribution<float> normal;
  std::vector<float> logits(rows * vocab);
  for (float& l : logits) l = 2.0f * normal(rng_);
  std::vector<cuda::SamplingRow> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(r % 6);
    params[r] = {kind == 0 ? 0.0f : 0.7f + 0.1f * static_cast<float>(r % 5), kind == 3 ? 0.9f : kind == 5 ? 1e-6f : 1.0f,
                 kind == 2 ? 50 : kind == 4 ? 1 : 0, 1000u + static_cast<uint64_t>(r), r * 7};
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
  std::vector<float> scratch;
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    SamplingParams p;
    p.temperature = params[r].temperature;
    p.top_p = params[r].top_p;
    p.top_k = params[r].top_k;
    p.seed = params[r].seed;
    const int32_t want = sample_token(logits.data() + r * vocab, vocab, p, params[r].position, scratch);
    agree += got[r] == want;
    if (r % 6 == 0 || r % 6 == 4 || r % 6 == 5) {
      EXPECT_EQ(got[r], want) << "row " << r;
    }
  }
  EXPECT_GE(agree, rows * 995 / 1000) << agree << " of " << rows << " draws agree";
}

}  // namespace
}  // namespace deepinfer
