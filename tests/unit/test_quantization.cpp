// Quantised formats against values written by a numpy reference of each format
// (tests/fixtures/make_quant_fixtures.py): exact equality, since both compute fp8/fp4 value x power-of-two or
// fp32 scale in float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/fp4_weights.h"
#include "kernels/cpu/fp8_weights.h"
#include "kernels/fp_formats.h"
#include "src/model/checkpoint_tensors.h"
#include "src/model/deepseek/deepseek_model.h"
#include "src/model/quantization.h"
#include "src/model/safetensors.h"
#include "src/model/v41/v41_model.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < want.numel(); ++i) mismatches += got.data<float>()[i] != want.data<float>()[i];
  EXPECT_EQ(mismatches, 0) << what;
}

TEST(Quantization, Fp8WithUe8m0BlockScales) {
  const SafetensorsFile f(testing::fixture_dir("quant-formats.safetensors"));
  expect_equal(dequantize_fp8_blocks(f.read("fp8u_weight"), f.read("fp8u_scale"), 32, 32), f.read("fp8u_expected"),
               "fp8 e4m3 / UE8M0 32x32");
}

TEST(Quantization, Fp4E2m1WithUe8m0GroupScales) {
  const SafetensorsFile f(testing::fixture_dir("quant-formats.safetensors"));
  expect_equal(dequantize_fp4_groups(f.read("fp4_packed"), f.read("fp4_scale"), 32), f.read("fp4_expected"),
               "fp4 e2m1 / UE8M0 per 32");
}

TEST(Quantization, Fp8CheckpointLoadsDequantisedAndRuns) {
  const auto dir = testing::fixture_dir("tiny-v3-fp8");
  const ModelConfig config = load_model_config(dir);
  ASSERT_TRUE(config.quantization.fp8);
  EXPECT_EQ(config.quantization.block_rows, 16);
  const WeightStore weights = WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
  const SafetensorsFile expected(dir / "dequantized.safetensors");
  ASSERT_GT(expected.entries().size(), 20u);
  for (const auto& [name, entry] : expected.entries()) expect_equal(weights.get(name), expected.read(name), name);

  // The dequantised model still tracks the fp32 one (FP8 rounding only): logits of the longest fixture prompt.
  const DeepseekModel model(config, WeightStore::load(config, dir, LoadFormat::kSafetensors, 0));
  const nlohmann::json reference = testing::fixture_reference("tiny-v3-fp32");
  const std::vector<int32_t> prompt = reference.at("prompts").back().get<std::vector<int32_t>>();
  std::unique_ptr<KvCache> cache = model.make_kv_cache(4);
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  ForwardBatch batch;
  batch.token_ids = prompt;
  batch.sequences.push_back({0, static_cast<int64_t>(prompt.size()), blocks});
  const Tensor logits = model.forward(batch, *cache);
  const Tensor want = SafetensorsFile(testing::fixture_dir("tiny-v3-fp32") / "reference.safetensors").read("logits_5");
  double diff = 0, norm = 0;
  const int64_t vocab = logits.size(1), last = want.size(0) - 1;
  for (int64_t v = 0; v < vocab; ++v) {
    const double d = logits.data<float>()[v] - want.data<float>()[last * vocab + v];
    diff += d * d;
    norm += static_cast<double>(want.data<float>()[last * vocab + v]) * want.data<float>()[last * vocab + v];
  }
  const double err = std::sqrt(diff / norm);
  RecordProperty("fp8_vs_fp32_last_logits_rel_error", std::to_string(err));
  // Measured 0.117 (2026-11-29): e4m3 keeps 3 mantissa bits, and on this prompt transformers' own bf16 run
  // is already 0.107 from fp32 (bf16_yardstick.json); 0.25 says "tracks", not "equals".
  EXPECT_LT(err, 0.25) << "fp8 (16x16 blocks) vs fp32 logits";
}

TEST(Quantization, V41CheckpointWithFp8ProjectionsAndFp4ExpertsLoads) {
  // DeepSeek-V4.x's layout: `<module>.scale` UE8M0 scales (F8_E8M0), FP8 32 x 32 projections, FP4 experts (I8).
  const auto dir = testing::fixture_dir("tiny-v41-fp8");
  const ModelConfig config = load_model_config(dir);
  ASSERT_TRUE(config.quantization.fp8 && config.quantization.fp4_experts);
  const WeightStore weights = WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
  const SafetensorsFile expected(dir / "dequantized.safetensors");
  int64_t fp8 = 0, fp4 = 0, draft = 0;
  for (const auto& [name, entry] : expected.entries()) {
    expect_equal(weights.get(name), expected.read(name), name);
    if (name.starts_with("mtp.")) ++draft;
    else (name.find(".experts.") != std::string::npos ? fp4 : fp8) += 1;
  }
  EXPECT_EQ(fp8, 8);    // wq_a, wq_b, wkv, wo_a, wo_b and the shared expert's w1, w2, w3 of layer 1
  EXPECT_EQ(fp4, 24);   // w1, w2, w3 of its 8 experts
  EXPECT_EQ(draft, 3);  // the DSpark layer's FP8, FP4 and fp32 tensors, kept under their checkpoint names
}

// The engram variant: its tables in the release's FP8 layout (e4m3 rows, a UE8M0 scale per 32 values of a row)
// load to their exact values, beside the FP8 projections and FP4 experts; the model then runs from them.
TEST(Quantization, V41EngramTablesInFp8Load) {
  const auto dir = testing::fixture_dir("tiny-v41-engram-fp8");
  const ModelConfig config = load_model_config(dir);
  ASSERT_TRUE(config.quantization.fp8 && !config.v41.engram_layer_ids.empty());
  WeightStore weights = WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
  const SafetensorsFile expected(dir / "dequantized.safetensors");
  int64_t tables = 0;
  for (const auto& [name, entry] : expected.entries()) {
    expect_equal(weights.get(name), expected.read(name), name);
    tables += name.ends_with(".engram.embed.weight");
  }
  EXPECT_EQ(tables, 2);
  const DeepseekV41Model model(config, std::move(weights));
  std::vector<int32_t> blocks = {0};
  std::unique_ptr<KvCache> cache = model.make_kv_cache(1);
  ForwardBatch batch;
  batch.token_ids = {5, 17, 200, 3};
  batch.sequences.push_back({0, 4, blocks});
  const Tensor logits = model.forward(batch, *cache);
  EXPECT_TRUE(std::all_of(logits.data<float>(), logits.data<float>() + logits.numel(),
                          [](float x) { return std::isfinite(x); }));
}

// What the GPU backend relies on when it holds these weights in FP8/FP4 again (quantised on the device from the
// loaded values, kernels/cpu/fp8_weights.h and fp4_weights.h under the same names as the CUDA conversions, which
// the GPU op table holds to these bit for bit): a checkpoint's FP8 projections and FP4 experts, dequantised on
// load, quantise back to exactly the same values.
TEST(Quantization, CheckpointValuesQuantiseBackToThemselves) {
  const auto dir = testing::fixture_dir("tiny-v41-fp8");
  const SafetensorsFile expected(dir / "dequantized.safetensors");
  int64_t checked = 0;
  for (const auto& [name, entry] : expected.entries()) {
    if (name.starts_with("mtp.")) continue;
    const Tensor t = expected.read(name);
    ASSERT_EQ(t.shape().size(), 2u) << name;
    const int64_t n = t.shape()[0], k = t.shape()[1];
    std::vector<float> back(n * k);
    if (name.find(".experts.") != std::string::npos) {
      std::vector<uint8_t> codes(n * k / 2), scales(n * k / 32);
      cpu::quantize_fp4_rows(t.data<float>(), n, k, codes.data(), scales.data());
      cpu::dequantize_fp4_rows(codes.data(), scales.data(), n, k, back.data());
    } else {
      std::vector<uint8_t> codes(n * k), scales(n / 32 * (k / 32));
      cpu::quantize_fp8_blocks(t.data<float>(), n, k, codes.data(), scales.data());
      cpu::dequantize_fp8_blocks(codes.data(), scales.data(), n, k, back.data());
    }
    int64_t differing = 0;
    for (int64_t i = 0; i < n * k; ++i) differing += back[i] != t.data<float>()[i];
    EXPECT_EQ(differing, 0) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 32);  // 8 FP8 projections (5 attention, 3 shared expert) and 24 FP4 expert tensors
}

// DeepSeek-V3's form (fp32 scales a tile), which the CUDA backend holds as stored: a host store's values of the FP8
// fixture (the checkpoint's codes times scales in fp32) give back the checkpoint's codes and scales bit for bit, and
// so do random FP8 tiles whose largest code is below 448 (other scales than amax / 448); quantize_fp8_scaled takes
// amax / 448 and its codes dequantise within half an e4m3 step.
TEST(Quantization, V3Fp8TilesComeBackFromTheirValues) {
  const auto dir = testing::fixture_dir("tiny-v3-fp8");
  const ModelConfig config = load_model_config(dir);
  const int64_t block = config.quantization.block_rows;
  const CheckpointTensors tensors(config, dir);
  int64_t checked = 0;
  for (const std::string& name : tensors.names()) {
    if (!tensors.stored_fp8(name)) continue;
    const Tensor values = tensors.read(name);
    const CheckpointTensors::Fp8Blocks stored = tensors.read_fp8(name);
    const int64_t n = values.shape()[0], k = values.shape()[1];
    std::vector<uint8_t> codes(n * k);
    std::vector<float> scales(stored.scales.numel());
    cpu::recover_fp8_scaled(values.data<float>(), n, k, block, codes.data(), scales.data());
    EXPECT_EQ(std::memcmp(codes.data(), stored.codes.raw_data(), codes.size()), 0) << name;
    EXPECT_EQ(std::memcmp(scales.data(), stored.scales.raw_data(), scales.size() * sizeof(float)), 0) << name;
    ++checked;
  }
  EXPECT_GT(checked, 20);

  std::mt19937 rng(7);
  const int64_t n = 40, k = 48, tile = 16, tiles = 3 * 3;
  std::vector<uint8_t> codes(n * k), got_codes(n * k);
  std::vector<float> scales(tiles), got_scales(tiles), values(n * k);
  for (float& s : scales) s = std::uniform_real_distribution<float>(1e-4f, 1e-1f)(rng);
  for (uint8_t& c : codes)  // magnitudes up to 120 (code 0x6f): no tile's largest code is 448
    c = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 0x6f)(rng) | (rng() % 2 ? 0x80 : 0));
  codes[0] = 1, codes[1] = 0x81;  // a subnormal of each sign
  cpu::dequantize_fp8_scaled(codes.data(), scales.data(), n, k, tile, values.data());
  cpu::recover_fp8_scaled(values.data(), n, k, tile, got_codes.data(), got_scales.data());
  std::vector<float> again(n * k);
  cpu::dequantize_fp8_scaled(got_codes.data(), got_scales.data(), n, k, tile, again.data());
  EXPECT_EQ(std::memcmp(again.data(), values.data(), values.size() * sizeof(float)), 0);

  cpu::quantize_fp8_scaled(values.data(), n, k, tile, got_codes.data(), got_scales.data());
  cpu::dequantize_fp8_scaled(got_codes.data(), got_scales.data(), n, k, tile, again.data());
  for (int64_t i = 0; i < n * k; ++i) {
    const float s = got_scales[(i / k / tile) * 3 + (i % k) / tile];
    ASSERT_LE(std::fabs(again[i] - values[i]), std::max(std::fabs(values[i]) / 16.0f, s / 512.0f)) << i;
  }
}

// The FP8 GEMM's activations (quantize_fp8_activations): a scale a row and 128 columns, amax / 448, stored with the
// rows fastest. Values that are e4m3 grid points times a group's scale, the largest 448 of it, come back exactly;
// a zero group gets scale 1 and zero codes; random values within 1/16 (the e4m3 step) of themselves.
TEST(Quantization, ActivationsAScaleARowAnd128Columns) {
  std::mt19937 rng(5);
  const int64_t rows = 3, k = 384, groups = k / 128;
  std::vector<float> x(rows * k), scales(rows * groups), want_scales(rows * groups);
  std::vector<uint8_t> codes(rows * k);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const bool zero = r == 1 && g == 2;
      want_scales[g * rows + r] = zero ? 1.0f : std::ldexp(1.0f, static_cast<int>(r + 2 * g) - 6);
      for (int64_t c = g * 128; c < (g + 1) * 128; ++c) {
        const uint8_t code = c == g * 128 ? 0x7e : static_cast<uint8_t>(rng() % 0x7e | (rng() % 2 ? 0x80 : 0));
        x[r * k + c] = zero ? 0.0f : e4m3_value(code) * want_scales[g * rows + r];  // 0x7e: 448
      }
    }
  cpu::quantize_fp8_activations(x.data(), rows, k, codes.data(), scales.data());
  EXPECT_EQ(scales, want_scales);
  for (int64_t i = 0; i < rows * k; ++i)
    ASSERT_EQ(e4m3_value(codes[i]) * scales[(i % k / 128) * rows + i / k], x[i]) << i;

  for (float& v : x) v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng);
  cpu::quantize_fp8_activations(x.data(), rows, k, codes.data(), scales.data());
  for (int64_t i = 0; i < rows * k; ++i) {
    const float s = scales[(i % k / 128) * rows + i / k];
    ASSERT_LE(std::fabs(e4m3_value(codes[i]) * s - x[i]), std::max(std::fabs(x[i]) / 16.0f, s / 512.0f)) << i;
  }
}

// The CUDA cache keeps V4.1's compressed entries and indexer keys as FP4 bytes: what fake_quant_fp4 makes of rows
// comes back from their bytes bit for bit (-0 included), for both block forms, at any magnitude (e4m3 scales
// subnormal below 2^-6 included).
TEST(Quantization, FakeQuantisedFp4RowsRoundTripThroughTheirBytes) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (const auto& [block, e4m3] : {std::pair<int64_t, bool>{16, true}, {32, false}}) {
    const int64_t rows = 64, n = 512;
    std::vector<float> x(rows * n);
    for (int64_t r = 0; r < rows; ++r) {
      const float magnitude = std::ldexp(1.0f, static_cast<int>(r % 40) - 30);  // 2^-30 .. 2^9
      for (int64_t i = 0; i < n; ++i) x[r * n + i] = r % 7 == 3 && i % 3 == 0 ? -0.0f : magnitude * normal(rng);
    }
    std::fill(x.begin(), x.begin() + block, 0.0f);  // an all-zero block
    std::vector<uint8_t> codes(rows * n / 2), scales(rows * n / block);
    cpu::encode_fp4_rows(x.data(), rows, n, block, e4m3, codes.data(), scales.data());
    cpu::fake_quant_fp4(x.data(), rows, n, block, e4m3);
    std::vector<float> back(rows * n);
    cpu::decode_fp4_rows(codes.data(), scales.data(), rows, n, block, e4m3, back.data());
    int64_t negative_zeros = 0;
    for (float v : x) negative_zeros += v == 0.0f && std::signbit(v);
    EXPECT_GT(negative_zeros, 0);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::memcmp(&back[i], &x[i], sizeof(float)), 0)
          << "block " << block << ": value " << i << " is " << x[i] << ", from its bytes " << back[i];
    }
  }
}

TEST(Quantization, RejectsUnsupportedQuantizationConfigs) {
  const std::string base = R"({"model_type": "deepseek_v3", "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "kv_lora_rank": 4,
      "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4, "max_position_embeddings": 16, )";
  EXPECT_THROW(parse_model_config(base + R"("quantization_config": {"quant_method": "gptq"}})", "c.json"), InputError);
  EXPECT_THROW(parse_model_config(base + R"("quantization_config": {"quant_method": "fp8", "expert_dtype": "fp4"}})",
                                  "c.json"),
               InputError);
  EXPECT_THROW(parse_model_config(base + R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 8]}})",
                                  "c.json"),
               InputError);
  EXPECT_NO_THROW(parse_model_config(base + R"("quantization_config": {"quant_method": "fp8"}})", "c.json"));
}

}  // namespace
}  // namespace deepinfer
