// The op table's FP8 Linear rows (tests/gpu/op_test.h says the harness's rules): the conversions of both scale grids
// (V4.1's ue8m0 32 x 32 blocks, V3's fp32 tiles) against their CPU forms, and the FP8 matrix-vector and skinny
// tensor-core Linear layers against the CPU's Linear on the dequantised weight; the FP8 GEMM (activations quantised
// too) against the CPU's Linear on both sides' dequantised values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "kernels/cpu/fp8_weights.h"
#include "kernels/cpu/ops.h"
#include "kernels/fp_formats.h"
#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "tests/gpu/op_test.h"

namespace deepinfer::op_test {
namespace {

// The skinny Linear over a weight an earlier kernel of the stream writes: an FP8 weight dequantised into a buffer
// poisoned (NaN) just before, `repeats` times back to back with no host wait between, as the V4.1 model runs
// its FP8 projections above the matrix-vector rows. Reading that weight before the wait for its dequantisation
// (the resident weights' early loads) gave NaN rows under 2p2d on one GPU; every repeat must match.
void linear_skinny_dequantised(OpRun& r) {
  const int64_t rows = r["rows"], n = r["n"], k = r["k"], repeats = r["repeats"];
  std::vector<float> x_f, w_raw;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(rows * k, x_f));
  r.random_bf16(n * k, w_raw, 0.05f);
  std::vector<uint8_t> codes(n * k), scales(n / 32 * (k / 32));
  std::vector<float> w_f(n * k), want(rows * n);
  cpu::quantize_fp8_blocks(w_raw.data(), n, k, codes.data(), scales.data());
  cpu::dequantize_fp8_blocks(codes.data(), scales.data(), n, k, w_f.data());
  cpu::linear(x_f.data(), w_f.data(), nullptr, want.data(), rows, n, k);
  auto d_codes = DeviceArray<uint8_t>::from_host(codes), d_scales = DeviceArray<uint8_t>::from_host(scales);
  DeviceArray<Bf16> dequantised(n * k);
  DeviceArray<float> y(repeats * rows * n);
  y.poison();
  for (int64_t i = 0; i < repeats; ++i) {
    DI_CUDA_CHECK(cudaMemsetAsync(dequantised.data(), 0xff, n * k * sizeof(Bf16), cudaStreamPerThread));
    cuda::dequantize_fp8_blocks(d_codes.data(), cuda::Fp8BlockScales::ue8m0(d_scales.data()), n, k, bf(dequantised),
                                nullptr);
    cuda::linear_skinny(bf(x), bf(dequantised), y.data() + i * rows * n, true, rows, n, k, num_sms(), nullptr,
                        cuda::WeightSource::kFromStream);
  }
  sync();
  const std::vector<float> all = y.to_host();
  for (int64_t i = 0; i < repeats; ++i)
    r.close("y, repeat " + std::to_string(i),
            std::vector<float>(all.begin() + i * rows * n, all.begin() + (i + 1) * rows * n), want);
}

// FP8 weight blocks: random bf16 values over a wide range (a block of tiny ones, a zero block) quantised on the
// device and on the CPU — the same codes and scales — dequantised back the same, and FP8 values quantised again
// unchanged.
void fp8_blocks(OpRun& r) {
  const int64_t n = r["n"], k = r["k"];
  std::vector<float> w_f;
  std::vector<Bf16> bits = r.random_bf16(n * k, w_f);
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t block = (i / k / 32) * (k / 32) + (i % k) / 32;
    const float v = block == 1 ? std::ldexp(w_f[i], -20) : block == 2 ? 0.0f : std::ldexp(w_f[i], static_cast<int>(block % 7) - 3);
    bits[i] = float_to_bf16(v);
    w_f[i] = bf16_to_float(bits[i]);
  }
  auto w = DeviceArray<Bf16>::from_host(bits);
  DeviceArray<uint8_t> codes(n * k), scales(n / 32 * (k / 32)), codes2(n * k), scales2(n / 32 * (k / 32));
  DeviceArray<Bf16> back(n * k), again(n * k);
  codes.poison();
  scales.poison();
  back.poison();
  cuda::quantize_fp8_blocks(bf(w), n, k, codes.data(), scales.data(), nullptr);
  cuda::dequantize_fp8_blocks(codes.data(), cuda::Fp8BlockScales::ue8m0(scales.data()), n, k, bf(back), nullptr);
  cuda::quantize_fp8_blocks(bf(back), n, k, codes2.data(), scales2.data(), nullptr);
  cuda::dequantize_fp8_blocks(codes2.data(), cuda::Fp8BlockScales::ue8m0(scales2.data()), n, k, bf(again), nullptr);
  sync();
  std::vector<uint8_t> want_codes(n * k), want_scales(n / 32 * (k / 32));
  std::vector<float> want_back(n * k);
  cpu::quantize_fp8_blocks(w_f.data(), n, k, want_codes.data(), want_scales.data());
  cpu::dequantize_fp8_blocks(want_codes.data(), want_scales.data(), n, k, want_back.data());
  r.exact("codes", codes.to_host(), want_codes);
  r.exact("scales", scales.to_host(), want_scales);
  r.exact("dequantised", to_float(back.to_host()), want_back);
  r.exact("FP8 values quantised again", again.to_host(), back.to_host());
}

// DeepSeek-V3's FP8 form, fp32 scales a block x block tile (partial tiles at the edges where n or k is not a multiple):
// random bf16 values (a tile of tiny ones, a zero tile) quantised on the device and on the CPU — the same codes and
// scales — and dequantised: the CPU's fp32 values rounded to bf16.
void fp8_scaled(OpRun& r) {
  const int64_t n = r["n"], k = r["k"], block = r["block"];
  const int64_t per_row = (k + block - 1) / block, tiles = (n + block - 1) / block * per_row;
  std::vector<float> w_f;
  std::vector<Bf16> bits = r.random_bf16(n * k, w_f);
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t tile = (i / k / block) * per_row + (i % k) / block;
    const float v = tile == 1   ? std::ldexp(w_f[i], -20)
                    : tile == 2 ? 0.0f
                                : std::ldexp(w_f[i], static_cast<int>(tile % 7) - 3);
    bits[i] = float_to_bf16(v);
    w_f[i] = bf16_to_float(bits[i]);
  }
  auto w = DeviceArray<Bf16>::from_host(bits);
  DeviceArray<uint8_t> codes(n * k);
  DeviceArray<float> scales(tiles);
  DeviceArray<Bf16> back(n * k);
  codes.poison();
  scales.poison();
  back.poison();
  cuda::quantize_fp8_scaled(bf(w), n, k, static_cast<int32_t>(block), codes.data(), scales.data(), nullptr);
  const auto grid = cuda::Fp8BlockScales::fp32(scales.data(), static_cast<int32_t>(block));
  cuda::dequantize_fp8_blocks(codes.data(), grid, n, k, bf(back), nullptr);
  sync();
  std::vector<uint8_t> want_codes(n * k);
  std::vector<float> want_scales(tiles), want_back(n * k);
  cpu::quantize_fp8_scaled(w_f.data(), n, k, block, want_codes.data(), want_scales.data());
  cpu::dequantize_fp8_scaled(want_codes.data(), want_scales.data(), n, k, block, want_back.data());
  r.exact("codes", codes.to_host(), want_codes);
  r.exact("scales", scales.to_host(), want_scales);
  r.exact("dequantised", to_float(back.to_host()), round_bf16(want_back));
}

// A random [n, k] weight as FP8 blocks: its exact values on the host, its codes and scales on the device — ue8m0
// bytes a 32 x 32 block, or (f32_block > 0) fp32 a f32_block x f32_block tile.
struct Fp8Weight {
  std::vector<float> values;
  DeviceArray<uint8_t> codes, scale_bytes;
  int64_t f32_block = 0;
  cuda::Fp8BlockScales scales() const {
    if (f32_block == 0) return cuda::Fp8BlockScales::ue8m0(scale_bytes.data());
    const auto* values = reinterpret_cast<const float*>(scale_bytes.data());
    return cuda::Fp8BlockScales::fp32(values, static_cast<int32_t>(f32_block));
  }
};
// spread: f32 blocks' magnitudes 2^-2 .. 2^2 by block (a block read under another block's scale is off by order 1).
Fp8Weight random_fp8_weight(OpRun& r, int64_t n, int64_t k, int64_t f32_block = 0, bool spread = false) {
  std::vector<float> raw;
  r.random_bf16(n * k, raw, 0.05f);
  if (spread && f32_block > 0)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        raw[i * k + j] = std::ldexp(raw[i * k + j], static_cast<int>((i / f32_block * 3 + j / f32_block) % 5) - 2);
  std::vector<uint8_t> codes(n * k);
  std::vector<float> values(n * k);
  if (f32_block > 0) {
    std::vector<float> scales((n + f32_block - 1) / f32_block * ((k + f32_block - 1) / f32_block));
    cpu::quantize_fp8_scaled(raw.data(), n, k, f32_block, codes.data(), scales.data());
    cpu::dequantize_fp8_scaled(codes.data(), scales.data(), n, k, f32_block, values.data());
    std::vector<uint8_t> bytes(scales.size() * sizeof(float));
    std::memcpy(bytes.data(), scales.data(), bytes.size());
    return {std::move(values), DeviceArray<uint8_t>::from_host(codes), DeviceArray<uint8_t>::from_host(bytes),
            f32_block};
  }
  std::vector<uint8_t> scales(n / 32 * (k / 32));
  cpu::quantize_fp8_blocks(raw.data(), n, k, codes.data(), scales.data());
  cpu::dequantize_fp8_blocks(codes.data(), scales.data(), n, k, values.data());
  return {std::move(values), DeviceArray<uint8_t>::from_host(codes), DeviceArray<uint8_t>::from_host(scales)};
}

// The FP8 matrix-vector Linear against the CPU's Linear on the dequantised weight; rows `x_row` and `y_row` apart
// (the grouped output projection reads its group's columns of the attention output).
void linear_gemv_fp8(OpRun& r) {
  const int64_t m = r["rows"], n = r["n"], k = r["k"], x_row = r["x_row"], y_row = r["y_row"];
  const bool f32 = r["f32_out"] != 0;
  std::vector<float> x_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(m * x_row, x_f));
  const Fp8Weight w = random_fp8_weight(r, n, k, r["f32_block"]);
  LinearOutput y(f32, m * y_row);
  cuda::linear_gemv_fp8(bf(x), x_row, w.codes.data(), w.scales(), y.data(), y_row, f32, m, n, k, nullptr);
  sync();
  std::vector<float> x_rows(m * k), want(m * n), got(m * n);
  for (int64_t t = 0; t < m; ++t) std::copy_n(x_f.data() + t * x_row, k, x_rows.data() + t * k);
  cpu::linear(x_rows.data(), w.values.data(), nullptr, want.data(), m, n, k);
  const std::vector<float> all = y.host();
  for (int64_t t = 0; t < m; ++t) std::copy_n(all.data() + t * y_row, n, got.data() + t * n);
  r.close("outputs", got, want);
}

// The FP8 tensor-core Linear for decode batches against the CPU's Linear on the dequantised weight (the same
// products as the bf16 skinny kernel: only the order of the fp32 sums differs).
void linear_skinny_fp8(OpRun& r) {
  const int64_t m = r["rows"], n = r["n"], k = r["k"];
  const bool f32 = r["f32_out"] != 0;
  std::vector<float> x_f;
  auto x = DeviceArray<Bf16>::from_host(r.random_bf16(m * k, x_f));
  const Fp8Weight w = random_fp8_weight(r, n, k, r["f32_block"]);
  LinearOutput y(f32, m * n);
  ASSERT_TRUE(cuda::linear_skinny_fp8_supports(n, k, w.scales()));
  cuda::linear_skinny_fp8(bf(x), w.codes.data(), w.scales(), y.data(), f32, m, n, k, num_sms(), nullptr);
  sync();
  std::vector<float> want(m * n);
  cpu::linear(x_f.data(), w.values.data(), nullptr, want.data(), m, n, k);
  r.close("outputs", y.host(), want);
}

// The FP8 tensor-core GEMM with DeepSeek's scaling: the activations quantised on the device as on the CPU (the same
// codes and scales), then the product against the CPU's Linear on both operands' dequantised values (only the order
// of the fp32 sums differs), y rows y_row apart; row counts not a multiple of 4 have padded scale columns.
// Rows' and weight blocks' magnitudes spread over powers of two, so that a scale applied to the wrong row, group or
// block moves outputs by order 1.
DeviceArray<Bf16> spread_activations(OpRun& r, int64_t m, int64_t k, std::vector<float>& x_f) {
  std::vector<Bf16> x_bits = r.random_bf16(m * k, x_f);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < k; ++c) {  // row t, group g times 2^((t + 2 g) % 7 - 3): exact in bf16
      const int64_t i = t * k + c;
      x_f[i] = std::ldexp(x_f[i], static_cast<int>((t + 2 * (c / cuda::kFp8GemmGroup)) % 7) - 3);
      x_bits[i] = float_to_bf16(x_f[i]);
    }
  return DeviceArray<Bf16>::from_host(x_bits);
}

// The activations' scales as the CPU lays them out ([groups][rows]) from the device's ([groups][stride], the rows
// padded to fp8_activation_scale_stride).
std::vector<float> scales_without_padding(const DeviceArray<float>& scales, int64_t rows, int64_t groups) {
  const std::vector<float> all = scales.to_host();
  const int64_t stride = cuda::fp8_activation_scale_stride(rows);
  std::vector<float> got(rows * groups);
  for (int64_t g = 0; g < groups; ++g) std::copy_n(all.data() + g * stride, rows, got.data() + g * rows);
  return got;
}

// The CPU's product of x's quantised rows [first, first + rows) (of m) and w's values: [rows, n].
std::vector<float> cpu_fp8_gemm(const std::vector<float>& x_f, int64_t m, int64_t k, const std::vector<float>& w,
                                int64_t n, int64_t first, int64_t rows) {
  std::vector<uint8_t> codes(m * k);
  std::vector<float> scales(m * (k / cuda::kFp8GemmGroup)), x_q(rows * k), want(rows * n);
  cpu::quantize_fp8_activations(x_f.data(), m, k, codes.data(), scales.data());
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < k; ++c)
      x_q[t * k + c] = e4m3_value(codes[(first + t) * k + c]) * scales[(c / cuda::kFp8GemmGroup) * m + first + t];
  cpu::linear(x_q.data(), w.data(), nullptr, want.data(), rows, n, k);
  return want;
}

void fp8_gemm(OpRun& r) {
  const int64_t m = r["rows"], n = r["n"], k = r["k"], y_row = r["y_row"], groups = k / cuda::kFp8GemmGroup;
  std::vector<float> x_f;
  auto x = spread_activations(r, m, k, x_f);
  const Fp8Weight w = random_fp8_weight(r, n, k, cuda::kFp8GemmGroup, true);
  if (!cuda::fp8_gemm_supports(m, n, k, w.scales(), y_row))
    GTEST_SKIP() << "the FP8 GEMM runs on compute capability 9.0";
  DeviceArray<uint8_t> codes(m * k), workspace(std::max<size_t>(1, cuda::fp8_gemm_workspace_bytes(m, n, k)));
  const int64_t stride = cuda::fp8_activation_scale_stride(m);
  DeviceArray<float> scales(stride * groups);
  DeviceArray<Bf16> y(m * y_row);
  codes.poison();
  scales.poison();
  y.poison();
  cuda::quantize_fp8_activations(bf(x), k, m, k, codes.data(), scales.data(), nullptr);
  ASSERT_TRUE(cuda::fp8_gemm(codes.data(), scales.data(), w.codes.data(), static_cast<const float*>(w.scales().data),
                             bf(y), y_row, m, n, k, workspace.data(), workspace.size(), nullptr));
  sync();
  std::vector<uint8_t> want_codes(m * k);
  std::vector<float> want_scales(m * groups), got(m * n);
  cpu::quantize_fp8_activations(x_f.data(), m, k, want_codes.data(), want_scales.data());
  r.exact("activation codes", codes.to_host(), want_codes);
  r.exact("activation scales", scales_without_padding(scales, m, groups), want_scales);
  const std::vector<float> all = to_float(y.to_host());
  for (int64_t t = 0; t < m; ++t) std::copy_n(all.data() + t * y_row, n, got.data() + t * n);
  r.close("outputs", got, cpu_fp8_gemm(x_f, m, k, w.values, n, 0, m));
}

// An expert's rows of the permuted tokens: all `total` rows quantised in one launch, the GEMM over rows
// [first, first + rows) with the scales' stride of the whole block (x_scale_stride).
void fp8_gemm_row_range(OpRun& r) {
  const int64_t first = r["first"], rows = r["rows"], total = r["total"], n = r["n"], k = r["k"];
  std::vector<float> x_f;
  auto x = spread_activations(r, total, k, x_f);
  const Fp8Weight w = random_fp8_weight(r, n, k, cuda::kFp8GemmGroup, true);
  if (!cuda::fp8_gemm_supports(rows, n, k, w.scales(), n))
    GTEST_SKIP() << "the FP8 GEMM runs on compute capability 9.0";
  const int64_t stride = cuda::fp8_activation_scale_stride(total);
  DeviceArray<uint8_t> codes(total * k), workspace(std::max<size_t>(1, cuda::fp8_gemm_workspace_bytes(rows, n, k)));
  DeviceArray<float> scales(stride * (k / cuda::kFp8GemmGroup));
  DeviceArray<Bf16> y(rows * n);
  y.poison();
  cuda::quantize_fp8_activations(bf(x), k, total, k, codes.data(), scales.data(), nullptr);
  ASSERT_TRUE(cuda::fp8_gemm(codes.data() + first * k, scales.data() + first, w.codes.data(),
                             static_cast<const float*>(w.scales().data), bf(y), n, rows, n, k, workspace.data(),
                             workspace.size(), nullptr, stride));
  sync();
  r.close("outputs", to_float(y.to_host()), cpu_fp8_gemm(x_f, total, k, w.values, n, first, rows));
}

// Quantisation of rows gathered from x (an expert's padded rows read where the tokens are, moe_pad_sources): row r
// from x's row sources[r], repeated rows and rows of zeros (-1) among them, x's rows further apart than k. The
// reference: the CPU's quantisation of the gathered rows (a zero row: scale 1, codes 0).
void fp8_quantize_rows(OpRun& r) {
  const int64_t total = r["total"], rows = r["rows"], k = r["k"], x_row = k + 64, groups = k / cuda::kFp8GemmGroup;
  if (!cuda::fp8_gemm_supports(total, cuda::kFp8GemmGroup, k, cuda::Fp8BlockScales::fp32(nullptr, 128), 128))
    GTEST_SKIP() << "the FP8 GEMM's quantisation runs on compute capability 9.0";
  std::vector<float> x_f;
  const auto x = spread_activations(r, total, x_row, x_f);
  std::vector<int32_t> sources(rows);
  for (int64_t i = 0; i < rows; ++i)
    sources[i] = i % 5 == 3 ? -1 : static_cast<int32_t>((i * 7 + 1) % total);  // repeats once rows > total
  const auto d_sources = DeviceArray<int32_t>::from_host(sources);
  const int64_t stride = cuda::fp8_activation_scale_stride(rows);
  DeviceArray<uint8_t> codes(rows * k);
  DeviceArray<float> scales(stride * groups);
  codes.poison();
  scales.poison();
  cuda::quantize_fp8_activations(bf(x), x_row, rows, k, codes.data(), scales.data(), nullptr, d_sources.data());
  sync();
  std::vector<float> gathered(rows * k, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    if (sources[i] >= 0) std::copy_n(x_f.data() + sources[i] * x_row, k, gathered.data() + i * k);
  std::vector<uint8_t> want_codes(rows * k);
  std::vector<float> want_scales(rows * groups);
  cpu::quantize_fp8_activations(gathered.data(), rows, k, want_codes.data(), want_scales.data());
  r.exact("codes of the gathered rows", codes.to_host(), want_codes);
  r.exact("their scales", scales_without_padding(scales, rows, groups), want_scales);
}

// silu_mul's output quantised without storing it: the same codes and scales as silu_mul then the quantiser (both
// checked against the CPU in their own rows), bit for bit; and within the CPU's SwiGLU's quantisation's reach.
void fp8_quantize_silu_mul(OpRun& r) {
  const int64_t rows = r["rows"], inter = r["inter"], groups = inter / cuda::kFp8GemmGroup;
  const float limit = static_cast<float>(r["limit_milli"]) / 1000.0f;
  if (!cuda::fp8_gemm_supports(rows, cuda::kFp8GemmGroup, inter, cuda::Fp8BlockScales::fp32(nullptr, 128), 128))
    GTEST_SKIP() << "the FP8 GEMM's quantisation runs on compute capability 9.0";
  std::vector<float> gate_up_f;
  const auto gate_up = spread_activations(r, rows, 2 * inter, gate_up_f);
  const int64_t stride = cuda::fp8_activation_scale_stride(rows);
  DeviceArray<Bf16> act(rows * inter);
  DeviceArray<uint8_t> codes(rows * inter), want_codes(rows * inter);
  DeviceArray<float> scales(stride * groups), want_scales(stride * groups);
  codes.poison();
  scales.poison();
  cuda::silu_mul(bf(gate_up), bf(act), rows, inter, limit, nullptr);
  cuda::quantize_fp8_activations(bf(act), inter, rows, inter, want_codes.data(), want_scales.data(), nullptr);
  cuda::quantize_fp8_silu_mul(bf(gate_up), rows, inter, limit, codes.data(), scales.data(), nullptr);
  sync();
  r.exact("codes as silu_mul then the quantiser give", codes.to_host(), want_codes.to_host());
  r.exact("scales as silu_mul then the quantiser give", scales.to_host(), want_scales.to_host());
  // Against the CPU: the dequantised codes against fp32 SwiGLU, within what e4m3's 3 mantissa bits allow.
  std::vector<float> got(rows * inter), want(rows * inter);
  const std::vector<uint8_t> got_codes = codes.to_host();
  const std::vector<float> got_scales = scales.to_host();
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < inter; ++i) {
      float g = gate_up_f[t * 2 * inter + i], u = gate_up_f[t * 2 * inter + inter + i];
      if (limit > 0.0f) u = std::clamp(u, -limit, limit), g = std::min(g, limit);
      want[t * inter + i] = g / (1.0f + std::exp(-g)) * u;
      got[t * inter + i] = e4m3_value(got_codes[t * inter + i]) * got_scales[(i / cuda::kFp8GemmGroup) * stride + t];
    }
  r.close("dequantised against the CPU's SwiGLU", got, want);
}

}  // namespace

void add_fp8_rows(OpTable& t) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{96, 160}, {1280, 5120}})
    t.add("fp8_blocks", "u8", {{"n", n}, {"k", k}}, kExact, fp8_blocks);
  for (int64_t rows : {1, 3, 8})
    for (int64_t f32 : {0, 1}) {
      t.add("linear_gemv_fp8", f32 ? "f32" : "bf16",
            {{"rows", rows}, {"n", 1024}, {"k", 5120}, {"x_row", 5120}, {"y_row", 1024}, {"f32_out", f32},
             {"f32_block", 0}},
            f32 ? kF32 : kBf16, linear_gemv_fp8);
      t.add("linear_gemv_fp8", f32 ? "f32" : "bf16",  // a group of the grouped output projection, and k = 64
            {{"rows", rows}, {"n", 96}, {"k", 64}, {"x_row", 256}, {"y_row", 200}, {"f32_out", f32}, {"f32_block", 0}},
            f32 ? kF32 : kBf16, linear_gemv_fp8);
    }
  // DeepSeek-V3's fp32 scales a 128 x 128 tile: its kv_a projection (576 rows: a partial tile row), the experts'
  // down projection, and the FP8 fixture's 16 x 16 tiles over 24 rows.
  for (auto [n, k, block] : {std::tuple<int64_t, int64_t, int64_t>{576, 7168, 128}, {7168, 2048, 128}, {24, 64, 16},
                             {96, 160, 16}})
    t.add("fp8_scaled", "u8", {{"n", n}, {"k", k}, {"block", block}}, kExact, fp8_scaled);
  for (int64_t rows : {1, 2})
    for (auto [n, k, block] : {std::tuple<int64_t, int64_t, int64_t>{576, 7168, 128}, {7168, 2048, 128}, {24, 64, 16}})
      t.add("linear_gemv_fp8", "bf16",
            {{"rows", rows}, {"n", n}, {"k", k}, {"x_row", k}, {"y_row", n}, {"f32_out", 0}, {"f32_block", block}},
            kBf16, linear_gemv_fp8);
  // Decode batches past the FP8 matrix-vector kernel (3 rows on); V4.1's shapes (the stacked q/KV projection, the shared expert's
  // down projection, wo_b's k = 8192 split over a cluster), columns that end inside a block's 64, k = 64.
  for (int64_t rows : {3, 16, 33, 64})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{1792, 5120}, {5120, 2304}, {512, 8192}, {1056, 160}, {96, 64}})
      for (int64_t f32 : {0, 1}) {
        if (f32 && rows != 33) continue;
        t.add("linear_skinny_fp8", f32 ? "f32" : "bf16",
              {{"rows", rows}, {"n", n}, {"k", k}, {"f32_out", f32}, {"f32_block", 0}}, f32 ? kF32 : kBf16,
              linear_skinny_fp8);
      }
  // DeepSeek-V3's fp32 scales a 128 x 128 tile: q_a and kv_a stacked, q_b, o_proj (k = 16,384), an expert's gate
  // and up. o_proj at 64 rows only: quantising its 117 M weights and the CPU's product took 10-13 s a row.
  for (int64_t rows : {3, 16, 64})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2112, 7168}, {24576, 1536}, {7168, 16384}, {4096, 7168}}) {
      if (k == 16384 && rows != 64) continue;
      t.add("linear_skinny_fp8", "bf16", {{"rows", rows}, {"n", n}, {"k", k}, {"f32_out", 0}, {"f32_block", 128}},
            kBf16, linear_skinny_fp8);
    }
  // The FP8 GEMM: a few rows (a partial tile), rows of a wider output, a prefill chunk's at q_b's k (an eighth of its
  // n: the whole would cost the CPU reference 19 G multiply-adds) and at an expert's down projection.
  for (auto [rows, n, k, y_row] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{5, 256, 384, 256},
                                   {300, 640, 1024, 1024}, {512, 3072, 1536, 3072}, {200, 7168, 2048, 7168},
                                   {300, 256, 256, 256}, {300, 1024, 256, 1024}, {300, 256, 128, 256},
                                   {300, 256, 512, 256}})
    t.add("fp8_gemm", "bf16", {{"rows", rows}, {"n", n}, {"k", k}, {"y_row", y_row}}, kBf16, fp8_gemm);
  for (auto [total, rows] : {std::pair<int64_t, int64_t>{37, 61}, {300, 256}})
    t.add("fp8_quantize_rows", "u8", {{"total", total}, {"rows", rows}, {"k", 7168}}, kExact, fp8_quantize_rows);
  for (int64_t limit : {0, 7000})  // (the tolerance: e4m3's rounding, 3 mantissa bits, against fp32 SwiGLU)
    t.add("fp8_quantize_silu_mul", "u8", {{"rows", 45}, {"inter", 2048}, {"limit_milli", limit}}, 5e-2,
          fp8_quantize_silu_mul);
  for (auto [first, rows] : {std::pair<int64_t, int64_t>{256, 512}, {0, 256}})
    t.add("fp8_gemm_row_range", "bf16", {{"first", first}, {"rows", rows}, {"total", 1036}, {"n", 512}, {"k", 768}},
          kBf16, fp8_gemm_row_range);
  t.add("linear_skinny_dequantised", "f32", {{"rows", 16}, {"n", 4096}, {"k", 1024}, {"repeats", 64}}, kF32,
        linear_skinny_dequantised);
}

}  // namespace deepinfer::op_test
