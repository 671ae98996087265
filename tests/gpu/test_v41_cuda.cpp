// The CUDA V4.1 model (bf16) against the CPU reference (fp32) on the V4.1 fixtures — tests/fixtures/tiny-v41
// (every mechanism in small) with its fp32 weights, tests/fixtures/tiny-v41-fp8 (FP8 projections, FP4 experts,
// dequantised on load) and tests/fixtures/tiny-v41-engram (engram at two layers) — one-shot prefill of every
// prompt and token-by-token decode through the cache.
// The model is discontinuous where the reference quantises in the forward (K=V to FP8, the compressed entries,
// indexer keys and queries to FP4) and where it selects (the routing, the indexer's top-k): a perturbation at
// the last bit moves a value across a rounding boundary or a choice across a tie, and the logits by tens of
// percent. The CPU reference shows it itself: with only its weights rounded to bf16 (fp32 compute), the fp32
// fixture's logits move by 0.18 at the first position and ~0.37 on average. So
//  - the fixtures are held, on average over their prompts, to kYardstickFactor x that yardstick (measured here on
//    the same prompts) + kBoundFloor, as the V2/V3 GPU run is held to transformers' own bf16 error;
//  - on the FP8/FP4 fixture, whose weights bf16 holds exactly and which is calm at most positions, with every
//    compressed entry selected (no indexer choice left), most positions must agree to kCalmBound and the median
//    to kCalmMedian: a wrong op would move every position, a flip moves a few;
//  - sequences batched together are checked the same way; the GPU's own dummy weights against the yardstick.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/engram.cuh"
#include "kernels/cuda/moe_permute.cuh"
#include "src/core/device.h"
#include "src/core/device_array.h"
#include "src/model/architectures.h"
#include "src/model/cuda/cuda_moe.h"
#include "src/core/files.h"
#include "src/model/v41/cuda/cuda_v41_model.h"
#include "src/model/engram_hash.h"
#include "src/model/model_config.h"
#include "src/model/safetensors.h"
#include "src/model/v41/v41_model.h"
#include "tests/unit/fixtures.h"

namespace deepinfer {
namespace {

constexpr double kYardstickFactor = 1.5;
constexpr double kBoundFloor = 5e-3;
constexpr double kCalmBound = 1e-2;      // a calm position: bf16 activations against fp32, no flip
constexpr double kCalmShare = 0.6;       // of the positions at least this share is calm (68% measured, 2026-12-01)
constexpr double kCalmMedian = 5e-3;     // and the median position within this (3.4e-3 measured)

// The fixture's configuration with every compressed entry selected (top-k and candidate blocks above the
// prompts' 100 entries): nothing discrete left but the routing and the FP4/FP8 rounding.
ModelConfig all_selected(ModelConfig config) {
  config.v41.index_topk = 128;
  config.v41.candidate_topk_blocks = 64;
  return config;
}

double relative_error(const Tensor& got, const Tensor& want) {
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = static_cast<double>(got.data<float>()[i]) - want.data<float>()[i];
    diff += d * d;
    norm += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(diff / norm);
}

// Fraction of rows whose argmax agrees.
double argmax_agreement(const Tensor& a, const Tensor& b) {
  const int64_t rows = a.shape()[0], V = a.shape()[1];
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.data<float>() + r * V;
    const float* y = b.data<float>() + r * V;
    same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
  }
  return static_cast<double>(same) / static_cast<double>(rows);
}

WeightStore load_weights(const ModelConfig& config, const std::filesystem::path& dir) {
  return WeightStore::load(config, dir, LoadFormat::kSafetensors, 0);
}

// The FP8/FP4 fixture with every compressed entry selected, on GPU 0 (the set-up of the batch tests).
struct AllSelectedFp8Fixture {
  std::filesystem::path dir = testing::fixture_dir("tiny-v41-fp8");
  ModelConfig config = all_selected(load_model_config(dir));
  CudaV41Model gpu{config, HostWeightSource(load_weights(config, dir)), 0};
};

// The tensors the CUDA model keeps in fp32: the hyper-connections' bases and scales, the sinks, the routers' bias.
bool kept_fp32(const std::string& name) {
  for (const char* end : {"_base", "_scale", "attn_sink", "gate.bias"})
    if (name.ends_with(end)) return true;
  return false;
}

// The same weights as the GPU holds them: rounded to bf16, but for those it keeps in fp32.
WeightStore round_to_bf16(const ModelConfig& config, WeightStore weights) {
  for (const TensorSpec& spec : find_architecture(config.model_type)->tensor_specs(config)) {
    if (weights.data_or_null(spec.name) == nullptr || kept_fp32(spec.name)) continue;
    Tensor t = weights.take(spec.name);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_float(float_to_bf16(t.data<float>()[i]));
    weights.set(spec.name, std::move(t));
  }
  return weights;
}

Tensor one_shot(const CausalLm& model, const std::vector<int32_t>& prompt) {
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
  ForwardBatch batch;
  batch.token_ids = prompt;
  batch.sequences.push_back({0, static_cast<int64_t>(prompt.size()), blocks});
  batch.all_logits = true;
  return model.forward(batch, *cache);
}

// Every position's logits, the prompt fed one token a step through the cache.
Tensor token_by_token(const CausalLm& model, const std::vector<int32_t>& prompt) {
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
  const int64_t V = model.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  Tensor all = Tensor::zeros({n, V});
  for (int64_t p = 0; p < n; ++p) {
    ForwardBatch step;
    step.token_ids = {prompt[p]};
    step.sequences.push_back({p, 1, blocks, {prompt.data(), static_cast<size_t>(p)}});  // engram hashes read them
    const Tensor logits = model.forward(step, *cache);
    std::copy_n(logits.data<float>(), V, all.data<float>() + p * V);
  }
  return all;
}

std::vector<std::vector<int32_t>> fixture_prompts() {
  const nlohmann::json reference = testing::fixture_reference("tiny-v41");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : reference.at("prompts")) prompts.push_back(p.get<std::vector<int32_t>>());
  return prompts;
}

void expect_gpu_matches_cpu(const std::string& fixture) {
  const auto dir = testing::fixture_dir(fixture);
  const ModelConfig config = load_model_config(dir);
  const WeightStore weights = load_weights(config, dir);
  const CudaV41Model gpu(config, HostWeightSource(weights), 0);
  const DeepseekV41Model cpu(config, load_weights(config, dir));
  const DeepseekV41Model cpu_bf16_weights(config, round_to_bf16(config, load_weights(config, dir)));
  double sum_err = 0.0, sum_yard = 0.0, sum_decode = 0.0, worst = 0.0, agree = 0.0, agree_decode = 0.0;
  const auto prompts = fixture_prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Tensor want = one_shot(cpu, prompts[i]);
    const Tensor got = one_shot(gpu, prompts[i]);
    ASSERT_EQ(got.shape(), want.shape());
    const double err = relative_error(got, want), yard = relative_error(one_shot(cpu_bf16_weights, prompts[i]), want);
    const Tensor decoded = token_by_token(gpu, prompts[i]);
    const double decode_err = relative_error(decoded, want);
    sum_err += err, sum_yard += yard, sum_decode += decode_err, worst = std::max(worst, std::max(err, decode_err));
    agree += argmax_agreement(got, want), agree_decode += argmax_agreement(decoded, want);
    std::printf("[ V4.1 GPU ] %s prompt %zu (%zu tokens): one-shot %.3e, token by token %.3e vs CPU fp32; CPU with "
                "bf16 weights %.3e\n", fixture.c_str(), i, prompts[i].size(), err, decode_err, yard);
  }
  const double n = static_cast<double>(prompts.size());
  const double bound = kYardstickFactor * sum_yard / n + kBoundFloor;
  std::printf("[ V4.1 GPU ] %s: mean relative error one-shot %.3e, token by token %.3e (bound %.3e = %.1f x the bf16-"
              "weights yardstick %.3e + %.0e); worst %.3e; argmax agreement %.1f%% one-shot, %.1f%% token by token\n",
              fixture.c_str(), sum_err / n, sum_decode / n, bound, kYardstickFactor, sum_yard / n, kBoundFloor, worst,
              100.0 * agree / n, 100.0 * agree_decode / n);
  EXPECT_LT(sum_err / n, bound) << fixture << ": one-shot prefill";
  EXPECT_LT(sum_decode / n, bound) << fixture << ": token-by-token decode";
}

// Each position's relative error.
std::vector<double> by_position(const Tensor& got, const Tensor& want) {
  const int64_t V = want.shape()[1];
  std::vector<double> errors;
  for (int64_t p = 0; p < want.shape()[0]; ++p) {
    Tensor a = Tensor::zeros({1, V}), b = Tensor::zeros({1, V});
    std::copy_n(got.data<float>() + p * V, V, a.data<float>());
    std::copy_n(want.data<float>() + p * V, V, b.data<float>());
    errors.push_back(relative_error(a, b));
  }
  return errors;
}

// The share of positions within kCalmBound, and the median error; printed.
void expect_mostly_calm(const std::vector<double>& errors, const std::string& what) {
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  const double calm = static_cast<double>(std::count_if(errors.begin(), errors.end(),
                                                         [](double e) { return e < kCalmBound; })) /
                      static_cast<double>(errors.size());
  std::printf("[ V4.1 GPU ] %s: %zu positions, median relative error %.2e, %.0f%% within %.0e, worst %.2e\n",
              what.c_str(), errors.size(), sorted[sorted.size() / 2], 100.0 * calm, kCalmBound, sorted.back());
  EXPECT_GE(calm, kCalmShare) << what;
  EXPECT_LT(sorted[sorted.size() / 2], kCalmMedian) << what;
}

// The FP8/FP4 fixture with every compressed entry selected, GPU against the CPU: each prompt one-shot and token by
// token, every position.
TEST(CudaV41, MostPositionsMatchTheCpuWhereNoIndexerChoiceIsLeft) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const AllSelectedFp8Fixture fixture;
  const ModelConfig& config = fixture.config;
  const CudaV41Model& gpu = fixture.gpu;
  const DeepseekV41Model cpu(config, load_weights(config, fixture.dir));
  std::vector<double> one_shot_errors, decode_errors;
  for (const std::vector<int32_t>& prompt : fixture_prompts()) {
    const Tensor want = one_shot(cpu, prompt);
    for (double e : by_position(one_shot(gpu, prompt), want)) one_shot_errors.push_back(e);
    for (double e : by_position(token_by_token(gpu, prompt), want)) decode_errors.push_back(e);
  }
  expect_mostly_calm(one_shot_errors, "tiny-v41-fp8, every entry selected, one-shot");
  expect_mostly_calm(decode_errors, "tiny-v41-fp8, every entry selected, token by token");
}

// Two expert-parallel "ranks" in one process, for the CUDA MoE block's device path: every token's row twice, the
// first copy's entries on experts [0, E/2) and the second's on [E/2, E), the rest marked served elsewhere (id E,
// weight 0); combine adds both copies' sums at the token.
class SplitInTwoDispatch final : public ExpertDispatcher, public DeviceExpertDispatcher {
 public:
  SplitInTwoDispatch(int64_t experts, int64_t top_k, int64_t hidden) : E_(experts), K_(top_k), H_(hidden) {}
  HostDispatch dispatch(int64_t, const float*, const int32_t*, const float*, int64_t) override {
    throw std::logic_error("the device path only");
  }
  void combine(float*) override { throw std::logic_error("the device path only"); }
  DeviceExpertDispatcher* device() override { return this; }
  void fetch_split_rows(std::span<const int64_t>, std::span<const int32_t>, int64_t, const ServeRows&,
                        std::byte*) override {
    throw std::logic_error("whole tables");
  }
  DeviceDispatch dispatch(int64_t, const void* x, const int32_t* topk_ids, const float* topk_weights,
                          int64_t tokens) override {
    std::vector<int32_t> ids(tokens * K_), source(2 * tokens), rows_ids(2 * tokens * K_), own(tokens);
    std::vector<float> weights(tokens * K_), row_weights(2 * tokens * K_);
    DI_CUDA_CHECK(cudaMemcpy(ids.data(), topk_ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    DI_CUDA_CHECK(cudaMemcpy(weights.data(), topk_weights, weights.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t t = 0; t < tokens; ++t) {
        source[half * tokens + t] = static_cast<int32_t>(t);
        for (int64_t k = 0; k < K_; ++k) {
          const int64_t i = t * K_ + k, j = (half * tokens + t) * K_ + k;
          const bool here = (ids[i] < E_ / 2) == (half == 0);
          rows_ids[j] = here ? ids[i] : static_cast<int32_t>(E_);
          row_weights[j] = here ? weights[i] : 0.0f;
        }
      }
    std::iota(own.begin(), own.end(), 0);
    source_ = DeviceArray<int32_t>::from_host(source);
    ids_ = DeviceArray<int32_t>::from_host(rows_ids);
    weights_ = DeviceArray<float>::from_host(row_weights);
    tokens_ = DeviceArray<int32_t>::from_host(own);
    for (int32_t& o : own) o += static_cast<int32_t>(tokens);
    second_ = DeviceArray<int32_t>::from_host(own);
    x_ = DeviceArray<__nv_bfloat16>(2 * tokens * H_);
    y_ = DeviceArray<__nv_bfloat16>(2 * tokens * H_);
    num_tokens_ = tokens;
    cuda::embedding(static_cast<const __nv_bfloat16*>(x), source_.data(), x_.data(), 2 * tokens, H_, nullptr);
    return {x_.data(), ids_.data(), weights_.data(), 2 * tokens, y_.data(), tokens * K_};
  }
  void combine(void* out) override {
    auto* o = static_cast<__nv_bfloat16*>(out);
    cuda::add_rows_at(y_.data(), tokens_.data(), tokens_.data(), num_tokens_, H_, o, nullptr);
    cuda::add_rows_at(y_.data(), second_.data(), tokens_.data(), num_tokens_, H_, o, nullptr);
  }
  void set_placement(const std::vector<std::vector<int32_t>>&, int64_t) override {}
  void drain_routed_counts(std::span<int64_t>) override {}
  const ExchangeStats& stats() const override { return stats_; }

 private:
  int64_t E_, K_, H_, num_tokens_ = 0;
  DeviceArray<int32_t> source_, ids_, tokens_, second_;
  DeviceArray<float> weights_;
  DeviceArray<__nv_bfloat16> x_, y_;
  ExchangeStats stats_;
};

// The expert-parallel device path (entries served elsewhere through the FP4 matrix-vector kernels at decode, the
// FP4 tiles for a prefill chunk, the chunked dequantise + cuBLAS path with its zero row for a long one) against the
// local experts, same GPU model: every position close.
TEST(CudaV41, ExpertParallelDevicePathMatchesTheLocalExperts) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const AllSelectedFp8Fixture fixture;
  const ModelConfig& c = fixture.config;
  SplitInTwoDispatch split(c.n_routed_experts, c.num_experts_per_tok, c.hidden_size);
  auto run = [&](const std::vector<int32_t>& prompt, ExpertDispatcher* experts, bool decode) {
    const auto n = static_cast<int64_t>(prompt.size());
    std::vector<int32_t> blocks((n + KvCache::kBlockSize) / KvCache::kBlockSize + 1);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::unique_ptr<KvCache> cache = fixture.gpu.make_kv_cache(static_cast<int64_t>(blocks.size()));
    ForwardBatch batch;
    batch.token_ids = prompt;
    batch.sequences.push_back({0, n, blocks});
    batch.all_logits = true;
    Tensor logits = fixture.gpu.forward(batch, *cache, experts);
    if (!decode) return logits;
    ForwardBatch step;  // then one decode step
    step.token_ids = {prompt[0]};
    step.sequences.push_back({n, 1, blocks, {prompt.data(), static_cast<size_t>(n)}});
    return fixture.gpu.forward(step, *cache, experts);
  };
  std::vector<int32_t> long_prompt(600);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = static_cast<int32_t>(3 + (i * 37 + i / 7) % 250);
  std::vector<double> errors;
  for (const std::vector<int32_t>& prompt : {fixture_prompts()[3], long_prompt})
    for (bool decode : {false, true})
      for (double e : by_position(run(prompt, &split, decode), run(prompt, nullptr, decode))) errors.push_back(e);
  expect_mostly_calm(errors, "expert-parallel device path (two halves, entries served elsewhere) vs local experts");
}

TEST(CudaV41, Fp32FixtureMatchesTheCpuReference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_gpu_matches_cpu("tiny-v41");
}

TEST(CudaV41, Fp8Fp4FixtureMatchesTheCpuReference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_gpu_matches_cpu("tiny-v41-fp8");
}

// Engram at layers 1 and 4 (tests/fixtures/tiny-v41-engram): the rows hashed on the host, gathered on the GPU.
TEST(CudaV41, EngramFixtureMatchesTheCpuReference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_gpu_matches_cpu("tiny-v41-engram");
}

// The FP8 checkpoint's tables stay FP8 on the GPU (codes and a scale per 32 values of a row).
TEST(CudaV41, EngramFp8FixtureMatchesTheCpuReference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  expect_gpu_matches_cpu("tiny-v41-engram-fp8");
}

// The tables in pinned host memory (--engram-tables host): the same kernels read them over PCIe, so the same bits;
// bf16 tables and FP8 ones.
TEST(CudaV41, EngramTablesInHostMemoryGiveTheSameLogits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (const char* fixture : {"tiny-v41-engram", "tiny-v41-engram-fp8"}) {
    const auto dir = testing::fixture_dir(fixture);
    const ModelConfig config = load_model_config(dir);
    ModelConfig on_host = config;
    on_host.v41.engram_tables_on_host = true;
    const WeightStore weights = load_weights(config, dir);
    const CudaV41Model device_tables(config, HostWeightSource(weights), 0);
    const CudaV41Model host_tables(on_host, HostWeightSource(weights), 0);
    for (const std::vector<int32_t>& prompt : fixture_prompts()) {
      const Tensor a = one_shot(device_tables, prompt), b = one_shot(host_tables, prompt);
      ASSERT_EQ(a.shape(), b.shape());
      EXPECT_TRUE(std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>()))
          << fixture << ", " << prompt.size() << " tokens";
    }
  }
}

// The engram rows hashed on the device (cuda::engram_hash_rows from engram_hash_sources) are the host's
// (engram_rows) at DeepSeek-V4.1-Flash's sizes (buckets near 16M rows, multipliers up to its overflow bound; dummy
// hash tables): a prompt from position 0, a row whose n-grams reach before the start, verify rows after 100 tokens,
// and a decode row given only the max_ngram - 1 tokens before it.
TEST(CudaV41, EngramRowsHashedOnTheDeviceAreTheHosts) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const auto path = std::filesystem::path(DEEPINFER_SOURCE_DIR) / "configs/models/deepseek-v4.1-flash.json";
  ModelConfig config = parse_model_config(read_text_file(path, "model config"), path.string());
  V41TextConfig& v = config.v41;
  ASSERT_FALSE(v.engram_layer_ids.empty());
  dummy_engram_hash(v);
  const int64_t N = v.engram_max_ngram_size;
  std::mt19937 rng(29);
  const auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint32_t>(v.vocab_size)); };
  std::vector<std::vector<int32_t>> earlier = {{}, {token(), token()}, std::vector<int32_t>(100), {}};
  for (int32_t& t : earlier[2]) t = token();
  for (int64_t k = 0; k < N - 1; ++k) earlier[3].push_back(token());
  const std::vector<std::pair<int64_t, int64_t>> cached_new = {{0, 7}, {2, 1}, {100, 4}, {50, 1}};
  ForwardBatch batch;
  for (size_t s = 0; s < cached_new.size(); ++s) {
    batch.sequences.push_back({cached_new[s].first, cached_new[s].second, {}, earlier[s]});
    for (int64_t i = 0; i < cached_new[s].second; ++i) batch.token_ids.push_back(token());
  }
  const std::vector<int64_t> want = engram_rows(v, batch);
  const int64_t T = batch.num_tokens(), layers = std::ssize(v.engram_layer_ids);
  const auto tokens = DeviceArray<int32_t>::from_host(batch.token_ids);
  const auto sources = DeviceArray<int32_t>::from_host(engram_hash_sources(v, batch));
  const auto compressed = DeviceArray<int32_t>::from_host(v.engram_hash.compressed_ids);
  const auto multipliers = DeviceArray<int64_t>::from_host(v.engram_hash.multipliers);
  const auto primes = DeviceArray<int64_t>::from_host(v.engram_hash.primes);
  const auto offsets = DeviceArray<int64_t>::from_host(v.engram_hash.offsets);
  DeviceArray<int32_t> rows(std::ssize(want));
  rows.poison();
  cuda::engram_hash_rows(tokens.data(), sources.data(), compressed.data(),
                         v.engram_hash.compressed_ids[v.engram_pad_id], multipliers.data(), primes.data(),
                         offsets.data(), T, layers, N, v.engram_n_heads, rows.data(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_EQ(std::ssize(want), layers * T * v41_engram_columns(v));
  EXPECT_EQ(rows.to_host(), std::vector<int32_t>(want.begin(), want.end()));
}

// Several sequences of different lengths in one step (chunked prefill of two, a decode row, a fresh prompt): each
// sequence's logits as when it runs alone (the same kernels per row; GEMM paths may differ with the row count),
// on the FP8/FP4 fixture with every entry selected.
TEST(CudaV41, SequencesInOneBatchDoNotMix) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const AllSelectedFp8Fixture fixture;
  const ModelConfig& config = fixture.config;
  const CudaV41Model& gpu = fixture.gpu;
  const auto prompts = fixture_prompts();
  std::unique_ptr<KvCache> cache = gpu.make_kv_cache(16);
  std::vector<std::vector<int32_t>> tables = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  // First step: sequences 1 and 2 prefill all but their last 5 tokens; second step: all four together.
  ForwardBatch first;
  for (int s : {1, 2}) {
    const auto n = static_cast<int64_t>(prompts[s].size()) - 5;
    first.token_ids.insert(first.token_ids.end(), prompts[s].begin(), prompts[s].begin() + n);
    first.sequences.push_back({0, n, tables[s]});
  }
  gpu.forward(first, *cache);
  ForwardBatch second;
  second.all_logits = true;
  second.token_ids = prompts[0];
  second.sequences.push_back({0, static_cast<int64_t>(prompts[0].size()), tables[0]});
  for (int s : {1, 2}) {
    const auto n = static_cast<int64_t>(prompts[s].size());
    second.token_ids.insert(second.token_ids.end(), prompts[s].end() - 5, prompts[s].end());
    second.sequences.push_back({n - 5, 5, tables[s]});
  }
  second.token_ids.push_back(prompts[3][0]);
  second.sequences.push_back({0, 1, tables[3]});
  const Tensor together = gpu.forward(second, *cache);
  const int64_t V = config.vocab_size;
  int64_t row = 0;
  std::vector<double> errors;
  for (int s : {0, 1, 2, 3}) {
    const Tensor alone = one_shot(gpu, std::vector<int32_t>(prompts[s].begin(), s == 3 ? prompts[s].begin() + 1
                                                                                       : prompts[s].end()));
    const int64_t rows = s == 0 ? static_cast<int64_t>(prompts[0].size()) : s == 3 ? 1 : 5;
    Tensor mine = Tensor::zeros({rows, V}), theirs = Tensor::zeros({rows, V});
    std::copy_n(together.data<float>() + row * V, rows * V, mine.data<float>());
    std::copy_n(alone.data<float>() + (alone.shape()[0] - rows) * V, rows * V, theirs.data<float>());
    row += rows;
    for (double e : by_position(mine, theirs)) errors.push_back(e);
  }
  expect_mostly_calm(errors, "tiny-v41-fp8, four sequences in one step against each alone");
}

// A decode step of 40 sequences (80 expert pairs, past CudaMoe::kGemvMaxPairs: the FP4 experts' matrix-vector
// kernels at a size where bf16 experts take the grouped kernel): each sequence's logits as when its whole prompt
// runs alone.
TEST(CudaV41, ManySequencesDecodeAsEachAlone) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const AllSelectedFp8Fixture fixture;
  const ModelConfig& config = fixture.config;
  const CudaV41Model& gpu = fixture.gpu;
  const auto prompts = fixture_prompts();
  constexpr int kSequences = 40;
  ASSERT_GT(kSequences * config.num_experts_per_tok, CudaMoe::kGemvMaxPairs);
  std::unique_ptr<KvCache> cache = gpu.make_kv_cache(kSequences * 4);
  std::vector<std::vector<int32_t>> seqs, tables;
  ForwardBatch decode;
  for (int s = 0; s < kSequences; ++s) {
    const std::vector<int32_t>& prompt = prompts[s % prompts.size()];
    seqs.emplace_back(prompt.begin(), prompt.end() - (s % 3));
    const auto len = static_cast<int64_t>(seqs.back().size());
    ASSERT_LE(len, 4 * KvCache::kBlockSize);
    tables.push_back({4 * s, 4 * s + 1, 4 * s + 2, 4 * s + 3});
    ForwardBatch prefill;  // all but the last token, alone
    prefill.token_ids.assign(seqs.back().begin(), seqs.back().end() - 1);
    prefill.sequences.push_back({0, len - 1, tables.back()});
    gpu.forward(prefill, *cache);
    decode.token_ids.push_back(seqs.back().back());
    decode.sequences.push_back({len - 1, 1, tables.back()});
  }
  const Tensor together = gpu.forward(decode, *cache);
  const int64_t V = config.vocab_size;
  std::vector<double> errors;
  for (int s = 0; s < kSequences; ++s) {
    const Tensor alone = one_shot(gpu, seqs[s]);
    Tensor mine = Tensor::zeros({1, V}), theirs = Tensor::zeros({1, V});
    std::copy_n(together.data<float>() + s * V, V, mine.data<float>());
    std::copy_n(alone.data<float>() + (alone.shape()[0] - 1) * V, V, theirs.data<float>());
    errors.push_back(relative_error(mine, theirs));
  }
  expect_mostly_calm(errors, "tiny-v41-fp8, a decode step of 40 sequences against each alone");
}

// The dummy weights generated on the GPU: the CPU's dummy values (generated on the host, then rounded) within the
// yardstick of the same model, as the checkpoints are.
TEST(CudaV41, DummyWeightsMatchTheCpuModel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const auto dir = testing::fixture_dir("tiny-v41");
  const ModelConfig config = load_model_config(dir);
  const CudaV41Model gpu(config, DummyWeightSource(11, nullptr), 0);
  const DeepseekV41Model cpu(config, WeightStore::load(config, dir, LoadFormat::kDummy, 11));
  const DeepseekV41Model cpu_bf16(config, round_to_bf16(config, WeightStore::load(config, dir, LoadFormat::kDummy, 11)));
  const std::vector<int32_t> prompt = fixture_prompts()[2];
  const Tensor want = one_shot(cpu, prompt);
  const double err = relative_error(one_shot(gpu, prompt), want);
  const double yard = relative_error(one_shot(cpu_bf16, prompt), want);
  std::printf("[ V4.1 GPU ] dummy weights (seed 11), %zu tokens: relative error %.3e vs the CPU; the CPU with bf16 "
              "weights %.3e\n", prompt.size(), err, yard);
  EXPECT_LT(err, kYardstickFactor * yard + kBoundFloor);
}

// Bounded replay on the GPU (the floors in the window kernels, the compact form's kept plan and state): each
// prompt prefilled in one chunk and in two (the first chunk's last row below the floor), then two decode steps, under
// the mask and the compact form; compact against mask on the GPU, and against the CPU's compact form. The dropped
// rows' window entries at the compact layer stay as the cache had them (the compact form computed no dropped row).
TEST(CudaV41, CompactReplayGivesTheMaskFormsLogits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const AllSelectedFp8Fixture fixture;
  const ModelConfig& config = fixture.config;
  const V41TextConfig& v = config.v41;
  const DeepseekV41Model cpu(config, load_weights(config, fixture.dir));
  const DeepseekV41Model cpu_bf16_weights(config, round_to_bf16(config, load_weights(config, fixture.dir)));
  const int64_t keep = v.sliding_window + kV41BacktrackingTokens, compact_layer = v41_first_compact_layer(v);
  ASSERT_LT(compact_layer, v.num_hidden_layers) << "the fixture needs layers past its last KV source";
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<double> against_mask;
  double sum_err = 0.0, sum_yard = 0.0;
  int64_t compared = 0;
  for (const std::vector<int32_t>& prompt : fixture_prompts()) {
    const auto n = static_cast<int64_t>(prompt.size());
    if (n <= keep + 2) continue;
    const int64_t floor = n - keep;
    for (const int64_t first_chunk : {n, floor - 1}) {
      auto run = [&](const CausalLm& model, bool compact, float* first_entry_moved) {
        std::unique_ptr<KvCache> cache = model.make_kv_cache(8);
        cache->fill_random(5);
        const int64_t E = cache->entry_dim();
        std::vector<float> before(cache->num_layers() * E), after(before.size());
        cache->export_entries(blocks, 1, before.data());
        Tensor out = Tensor::zeros({4, config.vocab_size});
        int64_t row = 0;
        auto step = [&](int64_t cached, std::vector<int32_t> tokens, int64_t replay_floor) {
          ForwardBatch batch;
          const auto count = static_cast<int64_t>(tokens.size());
          batch.token_ids = std::move(tokens);
          batch.sequences.push_back({cached, count, blocks, {prompt.data(), static_cast<size_t>(cached)}});
          batch.sequences.back().replay_floor = replay_floor;
          batch.compact_replay = compact && replay_floor > 0;
          const Tensor logits = model.forward(batch, *cache);
          std::copy_n(logits.data<float>(), config.vocab_size, out.data<float>() + row++ * config.vocab_size);
        };
        step(0, {prompt.begin(), prompt.begin() + first_chunk}, floor);
        if (first_chunk < n) step(first_chunk, {prompt.begin() + first_chunk, prompt.end()}, floor);
        step(n, {7}, 0);
        step(n + 1, {9}, 0);
        cache->export_entries(blocks, 1, after.data());
        *first_entry_moved = std::fabs(after[compact_layer * E] - before[compact_layer * E]);
        Tensor rows = Tensor::zeros({row, config.vocab_size});
        std::copy_n(out.data<float>(), row * config.vocab_size, rows.data<float>());
        return rows;
      };
      float moved_mask = 0, moved_compact = 0, moved_cpu = 0;
      const Tensor masked = run(fixture.gpu, false, &moved_mask);
      const Tensor compacted = run(fixture.gpu, true, &moved_compact);
      const Tensor reference = run(cpu, true, &moved_cpu);
      const Tensor yardstick = run(cpu_bf16_weights, true, &moved_cpu);
      EXPECT_GT(moved_mask, 0.0f) << "the mask form writes position 0's window entry";
      EXPECT_EQ(moved_compact, 0.0f) << "the GPU's compact form computed a dropped row";
      for (double e : by_position(compacted, masked)) against_mask.push_back(e);
      sum_err += relative_error(compacted, reference);
      sum_yard += relative_error(yardstick, reference);
      ++compared;
    }
  }
  ASSERT_GT(compared, 0);
  std::vector<double> sorted = against_mask;
  std::sort(sorted.begin(), sorted.end());
  std::printf("[ V4.1 GPU ] compact vs mask form on the GPU: %zu rows (%ld runs), median %.2e, worst %.2e\n",
              sorted.size(), static_cast<long>(compared), sorted[sorted.size() / 2], sorted.back());
  // Every row's arithmetic is the mask form's (per-row kernels, the same GEMM paths at these sizes): measured bit
  // for bit (2026-12-02).
  EXPECT_EQ(sorted.back(), 0.0) << "compact against mask on the GPU";
  // Against the CPU's compact form, held as every V4.1 fixture is: to the yardstick of the CPU with bf16 weights.
  const double n = static_cast<double>(compared), bound = kYardstickFactor * sum_yard / n + kBoundFloor;
  std::printf("[ V4.1 GPU ] compact form, GPU vs CPU: mean relative error %.3e (bound %.3e = %.1f x the bf16-weights "
              "yardstick %.3e + %.0e)\n", sum_err / n, bound, kYardstickFactor, sum_yard / n, kBoundFloor);
  EXPECT_LT(sum_err / n, bound);
}

}  // namespace
}  // namespace deepinfer
