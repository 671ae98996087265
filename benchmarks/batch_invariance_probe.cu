// Issue #28's map: which of the CUDA backend's row-wise ops give a row different bits depending on how many rows
// share its launch. For each op, a probe row (fixed random input) is run alone (1 row) and inside batches of M
// rows (random companions), placed first and in the middle; the probe's output bits are compared with the 1-row
// run's. Prints one JSON line per (op, M): identical or not, the largest difference relative to the row's largest
// output, and a hash of the row's bits (equal hashes: the same bits, so batches of one path group together). A
// measurement, not a test: it asserts nothing.
//
//   batch_invariance_probe [--batches 1,2,3,4,8,16,17,32,64,65,128,256]
//
// Ops: the Linear layers through the model's own dispatch (device_linear: matrix-vector kernels at 1-2 rows, the
// skinny tensor-core kernel, cuBLAS), bf16 and FP8 weights, at V4.1-Flash's projection shapes and the LM head, and
// with one kernel for every row count (matrix-vector, or skinny in launches of 64 rows);
// V4.1's sparse window attention (each row its own sequence of 640 cached keys); argmax and the top-p sampler over
// 129,280 ids; DeepSeek-V3's MLA decode (128 heads, 512 + 64: the model's split count for the batch, and fixed
// counts) and its absorbed per-head products (W_uk into the latent space, W_uv out of it) by each kernel that can
// run them (cuBLAS batched GEMM, the matrix-vector kernels, the batched skinny kernel in 64-row launches). Not
// covered: the MoE paths (CudaMoe by pair count), the indexer's cuBLAS products, attention prefill.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/microbench.h"
#include "kernels/cuda/fp8_linear.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/linear_gemv.cuh"
#include "kernels/cuda/linear_skinny.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/sparse_attention.cuh"
#include "src/core/check.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_memory.h"

namespace {

using namespace deepinfer;
using Bf16 = __nv_bfloat16;

std::mt19937 rng(2028);

std::vector<Bf16> random_bf16(size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<Bf16> v(n);
  for (Bf16& x : v) x = __float2bfloat16(normal(rng));
  return v;
}

std::vector<float> to_float(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// A batch of M rows of `width` values with the probe row at `at`, companions random.
std::vector<Bf16> batch_with_probe(const std::vector<Bf16>& probe, int64_t M, int64_t at, float scale) {
  std::vector<Bf16> rows = random_bf16(M * probe.size(), scale);
  std::copy(probe.begin(), probe.end(), rows.begin() + at * static_cast<int64_t>(probe.size()));
  return rows;
}

void report(const std::string& op, int64_t M, int64_t at, const std::vector<float>& got, const std::vector<float>& alone) {
  float largest = 0, diff = 0;
  bool same = true;
  for (size_t i = 0; i < alone.size(); ++i) {
    largest = std::max(largest, std::fabs(alone[i]));
    if (std::memcmp(&got[i], &alone[i], sizeof(float)) != 0) same = false;
    if (std::isfinite(got[i]) && std::isfinite(alone[i])) diff = std::max(diff, std::fabs(got[i] - alone[i]));
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a of the row's bits: equal hashes, equal rows
  for (const float v : got) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    hash = (hash ^ bits) * 1099511628211ull;
  }
  const nlohmann::json line = {{"op", op}, {"batch", M}, {"probe_row", at}, {"identical", same},
                               {"max_rel_diff", largest > 0 ? diff / largest : diff}, {"hash", hash}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

// Which kernel computes the Linear: the model's dispatch by rows, or one kernel for every row count (the skinny ones
// in launches of at most 64 rows).
enum class LinearPath { kDispatch, kGemv, kSkinny, kInvariantDispatch };

// y = x w^T, bf16 or FP8 weight [n, k], fp32 output.
void probe_linear(const std::vector<int64_t>& batches, int64_t n, int64_t k, bool fp8, Lane lane, int sms,
                  LinearPath path = LinearPath::kDispatch) {
  const char* how = path == LinearPath::kDispatch            ? ""
                    : path == LinearPath::kGemv              ? "_gemv_only"
                    : path == LinearPath::kSkinny            ? "_skinny_only"
                                                             : "_batch_invariant_dispatch";
  const std::string op = fmt::format("linear_{}_n{}_k{}{}", fp8 ? "fp8" : "bf16", n, k, how);
  auto w = DeviceArray<Bf16>::from_host(random_bf16(n * k, 1.0f / std::sqrt(static_cast<float>(k))));
  DeviceArray<uint8_t> codes(fp8 ? n * k : 0), scales(fp8 ? (n / 32) * (k / 32) : 0);
  DeviceLinear linear{nullptr, nullptr, {}, n, k};
  if (fp8) {
    cuda::quantize_fp8_blocks(w.data(), n, k, codes.data(), scales.data(), nullptr);
    linear.fp8 = codes.data();
    linear.scales = cuda::Fp8BlockScales::ue8m0(scales.data());
  } else {
    linear.bf16 = w.data();
  }
  ScratchPool scratch;
  const std::vector<Bf16> probe = random_bf16(k, 1.0f);
  std::vector<float> alone;
  for (const int64_t M : batches) {
    for (const int64_t at : {int64_t{0}, M / 2}) {
      if (M == 1 && at > 0) continue;
      auto x = DeviceArray<Bf16>::from_host(batch_with_probe(probe, M, at, 1.0f));
      DeviceArray<float> y(M * n);
      scratch.reset();
      if (path == LinearPath::kDispatch || path == LinearPath::kInvariantDispatch) {
        Lane how_lane = lane;
        how_lane.batch_invariant = path == LinearPath::kInvariantDispatch;  // --batch-invariant
        device_linear(how_lane, x.data(), linear, y.data(), true, M, scratch, sms);
      } else {
        for (int64_t first = 0; first < M; first += cuda::kLinearSkinnyMaxRows) {
          const int64_t rows = std::min(cuda::kLinearSkinnyMaxRows, M - first);
          const Bf16* xs = x.data() + first * k;
          float* ys = y.data() + first * n;
          if (path == LinearPath::kGemv && fp8)
            cuda::linear_gemv_fp8(xs, k, codes.data(), cuda::Fp8BlockScales::ue8m0(scales.data()), ys, n, true, rows, n,
                                  k, nullptr);
          else if (path == LinearPath::kGemv)
            cuda::linear_gemv(xs, w.data(), ys, true, rows, n, k, nullptr);
          else if (fp8)
            cuda::linear_skinny_fp8(xs, codes.data(), cuda::Fp8BlockScales::ue8m0(scales.data()), ys, true, rows, n, k,
                                    sms, nullptr);
          else
            cuda::linear_skinny(xs, w.data(), ys, true, rows, n, k, sms, nullptr);
        }
      }
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> all = y.to_host();
      const std::vector<float> row(all.begin() + at * n, all.begin() + (at + 1) * n);
      if (M == 1) alone = row;
      report(op, M, at, row, alone);
    }
  }
}

// V4.1's sparse window attention at the release's shape (64 heads x 512, window 128, 512 selected compressed
// entries a row), every row a query of its own over a shared paged FP8 cache: the probe row fixed, its companions
// at random positions with random picks.
void probe_sparse_attention(const std::vector<int64_t>& batches) {
  const int64_t heads = 64, hd = 512, window = 128, picks = 512, num_blocks = 64, max_blocks = 16;
  const int64_t num_slots = num_blocks * 64, num_extra = 4096;
  auto values = DeviceArray<Bf16>::from_host(random_bf16(num_slots * hd, 1.0f));
  auto extra = DeviceArray<Bf16>::from_host(random_bf16(num_extra * hd, 1.0f));
  std::vector<int64_t> all_slots(num_slots);
  for (int64_t i = 0; i < num_slots; ++i) all_slots[i] = i;
  auto d_slots = DeviceArray<int64_t>::from_host(all_slots);
  DeviceArray<uint8_t> codes(num_slots * hd), scales(num_slots * hd / 32);
  cuda::write_fp8_kv_rows(values.data(), hd, d_slots.data(), num_slots, hd, codes.data(), scales.data(), nullptr);
  std::vector<float> sinks(heads);
  for (float& v : sinks) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
  auto d_sinks = DeviceArray<float>::from_host(sinks);
  const std::vector<Bf16> probe_q = random_bf16(heads * hd, 0.05f);
  std::vector<int32_t> probe_table(max_blocks), probe_ids(picks);
  for (int64_t b = 0; b < max_blocks; ++b) probe_table[b] = static_cast<int32_t>((b * 5) % num_blocks);
  for (int64_t i = 0; i < picks; ++i) probe_ids[i] = static_cast<int32_t>(i * 7 % num_extra);
  std::sort(probe_ids.begin(), probe_ids.end());
  std::vector<float> alone;
  for (const int64_t M : batches) {
    const int64_t at = M / 2;
    std::vector<Bf16> q = batch_with_probe(probe_q, M, at, 0.05f);
    std::vector<int32_t> table(M * max_blocks), positions(M), offsets = {0}, ids;
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t b = 0; b < max_blocks; ++b)
        table[r * max_blocks + b] = r == at ? probe_table[b] : static_cast<int32_t>(rng() % num_blocks);
      positions[r] = r == at ? 700 : static_cast<int32_t>(130 + rng() % 800);
      for (int64_t i = 0; i < picks; ++i) ids.push_back(r == at ? probe_ids[i] : static_cast<int32_t>(rng() % num_extra));
      offsets.push_back(static_cast<int32_t>(ids.size()));
    }
    auto d_q = DeviceArray<Bf16>::from_host(q);
    auto d_table = DeviceArray<int32_t>::from_host(table), d_pos = DeviceArray<int32_t>::from_host(positions);
    auto d_offsets = DeviceArray<int32_t>::from_host(offsets), d_ids = DeviceArray<int32_t>::from_host(ids);
    DeviceArray<Bf16> out(M * heads * hd);
    const cuda::SparseWindowKeys keys{codes.data(), scales.data(), d_table.data(), max_blocks, d_pos.data(), window,
                                      extra.data(), d_offsets.data(), d_ids.data(), nullptr};
    cuda::sparse_window_attention(d_q.data(), keys, d_sinks.data(), M, heads, hd, 1.0f / std::sqrt(512.0f), out.data(),
                                  nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> all = to_float(out.to_host());
    const std::vector<float> row(all.begin() + at * heads * hd, all.begin() + (at + 1) * heads * hd);
    if (M == 1) alone = row;
    report("sparse_window_attention_64x512_w128_picks512", M, at, row, alone);
  }
}

// DeepSeek-V3's MLA decode (128 heads, latent 512 + rope 64) over a paged bf16 latent cache: the probe row's
// sequence (700 entries) alone and among M sequences of random lengths. splits < 0: the model's own choice for the
// batch (CudaDeepseekModel::decode_splits, copied here: enough blocks for the SMs, at least 32 keys a split),
// otherwise that many splits for every batch.
void probe_mla_decode(const std::vector<int64_t>& batches, int sms, int64_t splits) {
  const int64_t heads = 128, latent = 512, rope = 64, width = latent + rope, num_blocks = 512, max_blocks = 40;
  auto cache = DeviceArray<Bf16>::from_host(random_bf16(num_blocks * cuda::kMlaBlockSize * width, 1.0f));
  const std::vector<Bf16> probe_q = random_bf16(heads * width, 0.05f);
  std::vector<int32_t> probe_table(max_blocks);
  for (int64_t b = 0; b < max_blocks; ++b) probe_table[b] = static_cast<int32_t>((b * 7) % num_blocks);
  const auto model_splits = [&](int64_t M, int64_t max_len) {
    const int64_t blocks = M * ((heads + 15) / 16);
    const int64_t one_per_sm = (sms + blocks - 1) / blocks, two_per_sm = std::max<int64_t>(1, 2 * sms / blocks);
    const int64_t wanted = max_len / two_per_sm >= 256 ? two_per_sm : one_per_sm;
    return std::clamp<int64_t>(wanted, 1, std::clamp<int64_t>(max_len / 32, 1, 64));
  };
  std::vector<float> alone;
  for (const int64_t M : batches) {
    const int64_t at = M / 2;
    std::vector<int32_t> table(M * max_blocks), lens(M);
    int64_t max_len = 0;
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t b = 0; b < max_blocks; ++b)
        table[r * max_blocks + b] = r == at ? probe_table[b] : static_cast<int32_t>(rng() % num_blocks);
      lens[r] = r == at ? 700 : static_cast<int32_t>(64 + rng() % 2000);
      max_len = std::max<int64_t>(max_len, lens[r]);
    }
    const int64_t n_splits = splits > 0 ? splits : model_splits(M, max_len);
    auto d_q = DeviceArray<Bf16>::from_host(batch_with_probe(probe_q, M, at, 0.05f));
    auto d_table = DeviceArray<int32_t>::from_host(table), d_lens = DeviceArray<int32_t>::from_host(lens);
    DeviceArray<float> workspace(cuda::mla_decode_workspace_bytes(M, heads, latent, n_splits) / sizeof(float) + 1);
    DeviceArray<Bf16> out(M * heads * latent);
    cuda::mla_decode_attention(d_q.data(), cache.data(), d_table.data(), max_blocks, d_lens.data(), M, heads, latent,
                               rope, 1.0f / std::sqrt(192.0f), n_splits, workspace.data(), out.data(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> all = to_float(out.to_host());
    const std::vector<float> row(all.begin() + at * heads * latent, all.begin() + (at + 1) * heads * latent);
    if (M == 1) alone = row;
    report(splits > 0 ? fmt::format("mla_decode_128x512+64_splits{}", splits) : "mla_decode_128x512+64_model_splits",
           M, at, row, alone);
  }
}

// DeepSeek-V3's absorbed per-head products at M rows, [M, 128 heads, ...]: W_uk (q_nope 128 -> latent 512, the
// head's kv_b rows read as [k, n]) and W_uv (latent 512 -> v 128, as [n, k]), by each kernel that runs them.
enum class AbsorbPath { kCublas, kGemv, kSkinny };

void probe_absorbed_products(const std::vector<int64_t>& batches, bool uk, AbsorbPath path, cublasHandle_t blas,
                             int sms) {
  const int64_t heads = 128, nope = 128, v = 128, lora = 512;
  const int64_t in = uk ? nope : lora, out_dim = uk ? lora : v, row = heads * in;
  // kv_b per head: [nope + v rows, lora]; W_uk = its first nope rows, W_uv its last v rows.
  auto kv_b = DeviceArray<Bf16>::from_host(random_bf16(heads * (nope + v) * lora, 0.05f));
  const Bf16* w = kv_b.data() + (uk ? 0 : nope * lora);
  const char* how = path == AbsorbPath::kCublas ? "cublas" : path == AbsorbPath::kGemv ? "gemv" : "skinny64";
  const std::string op = fmt::format("mla_{}_{}", uk ? "w_uk" : "w_uv", how);
  if (uk && path == AbsorbPath::kSkinny) return;  // the skinny kernel reads its weight as [n, k]: W_uk is [k, n]
  const std::vector<Bf16> probe = random_bf16(row, 1.0f);
  std::vector<float> alone;
  for (const int64_t M : batches) {
    for (const int64_t at : {int64_t{0}, M / 2}) {
      if (M == 1 && at > 0) continue;
      auto x = DeviceArray<Bf16>::from_host(batch_with_probe(probe, M, at, 1.0f));
      DeviceArray<Bf16> y(M * heads * out_dim);
      const int64_t chunk = path == AbsorbPath::kGemv ? cuda::kLinearGemvMaxRows
                            : path == AbsorbPath::kSkinny ? cuda::kLinearSkinnyMaxRows : M;
      for (int64_t first = 0; first < M; first += chunk) {
        const int64_t rows = std::min(chunk, M - first);
        const Bf16* xs = x.data() + first * row;
        Bf16* ys = y.data() + first * heads * out_dim;
        // x [rows, heads, in] (row stride heads * in), w per head (nope + v) * lora apart, y [rows, heads, out].
        const cuda::GemvLayout layout{row, in, (nope + v) * lora, heads * out_dim, out_dim, lora};
        if (path == AbsorbPath::kCublas)
          DI_CUBLAS_CHECK(cuda::gemm_bf16(blas, rows, out_dim, in, {xs, row, in}, {w, lora, (nope + v) * lora}, !uk,
                                          ys, heads * out_dim, out_dim, false, heads));
        else if (path == AbsorbPath::kGemv && uk)
          cuda::batched_gemv_transposed(xs, w, ys, heads, rows, out_dim, in, layout, nullptr);
        else if (path == AbsorbPath::kGemv)
          cuda::batched_gemv(xs, w, ys, heads, rows, out_dim, in, layout, nullptr);
        else
          cuda::batched_linear_skinny(xs, w, ys, heads, rows, out_dim, in, layout, sms, nullptr);
      }
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> all = to_float(y.to_host());
      const std::vector<float> probe_row(all.begin() + at * heads * out_dim, all.begin() + (at + 1) * heads * out_dim);
      if (M == 1) alone = probe_row;
      report(op, M, at, probe_row, alone);
    }
  }
}

// argmax and the top-p sampler over DeepSeek's 129,280 ids: the probe row's draw alone and among M rows.
void probe_argmax_and_sampling(const std::vector<int64_t>& batches) {
  const int64_t vocab = 129280;
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> probe(vocab);
  for (float& l : probe) l = normal(rng);
  std::vector<int32_t> alone_greedy, alone_sampled;
  for (const int64_t M : batches) {
    std::vector<float> logits(M * vocab);
    for (float& l : logits) l = normal(rng);
    const int64_t at = M / 2;
    std::copy(probe.begin(), probe.end(), logits.begin() + at * vocab);
    auto d = DeviceArray<float>::from_host(logits);
    DeviceArray<int32_t> out(M);
    std::vector<cuda::SamplingRow> rows(M, cuda::SamplingRow{0.9f, 0.95f, 0, 11, 5});
    DeviceArray<uint8_t> params(M * sizeof(cuda::SamplingRow));
    DI_CUDA_CHECK(cudaMemcpy(params.data(), rows.data(), params.size(), cudaMemcpyHostToDevice));
    cuda::argmax_rows(d.data(), M, vocab, out.data(), nullptr, nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const int32_t greedy = out.to_host()[at];
    DeviceArray<uint8_t> workspace(cuda::sample_workspace_bytes(M, vocab));
    cuda::sample_rows(d.data(), M, vocab, reinterpret_cast<const cuda::SamplingRow*>(params.data()), out.data(),
                      workspace.data(), workspace.size(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const int32_t sampled = out.to_host()[at];
    if (M == 1) alone_greedy = {greedy}, alone_sampled = {sampled};
    report("argmax_rows", M, at, {static_cast<float>(greedy)}, {static_cast<float>(alone_greedy[0])});
    report("sample_rows_top_p", M, at, {static_cast<float>(sampled)}, {static_cast<float>(alone_sampled[0])});
  }
}

int run(int argc, char** argv) {
  std::vector<int64_t> batches = {1, 2, 3, 4, 8, 16, 17, 32, 64, 65, 128, 256};
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--batches") {
      batches.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string b; std::getline(list, b, ',');) batches.push_back(std::stoll(b));
    }
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CublasHandle blas;
  const Lane lane{cudaStreamPerThread, blas.get()};
  // V4.1-Flash's shapes: wq_a + wkv stacked [1280 + 512, 5120], wq_b [64 x 512, 1280], wo_b [5120, 8 x 1024], the
  // shared expert's gate_up [2 x 2304, 5120], and the LM head [129280, 5120] (bf16).
  for (const bool fp8 : {false, true}) {
    probe_linear(batches, 1792, 5120, fp8, lane, sms);
    probe_linear(batches, 32768, 1280, fp8, lane, sms);
    probe_linear(batches, 5120, 8192, fp8, lane, sms);
    probe_linear(batches, 4608, 5120, fp8, lane, sms);
  }
  probe_linear(batches, 129280, 5120, false, lane, sms);
  // The model's dispatch under --batch-invariant (Lane::batch_invariant), at every shape above.
  for (const bool fp8 : {false, true}) {
    probe_linear(batches, 1792, 5120, fp8, lane, sms, LinearPath::kInvariantDispatch);
    probe_linear(batches, 32768, 1280, fp8, lane, sms, LinearPath::kInvariantDispatch);
    probe_linear(batches, 5120, 8192, fp8, lane, sms, LinearPath::kInvariantDispatch);
    probe_linear(batches, 4608, 5120, fp8, lane, sms, LinearPath::kInvariantDispatch);
  }
  probe_linear(batches, 129280, 5120, false, lane, sms, LinearPath::kInvariantDispatch);
  // One kernel for every row count: is either the matrix-vector or the skinny kernel itself batch-invariant?
  for (const bool fp8 : {false, true})
    for (const LinearPath path : {LinearPath::kGemv, LinearPath::kSkinny}) {
      probe_linear(batches, 1792, 5120, fp8, lane, sms, path);
      probe_linear(batches, 5120, 8192, fp8, lane, sms, path);
    }
  probe_sparse_attention(batches);
  probe_argmax_and_sampling(batches);
  // DeepSeek-V3's MLA decode and absorbed products.
  for (const int64_t splits : {int64_t{-1}, int64_t{1}, int64_t{8}}) probe_mla_decode(batches, sms, splits);
  for (const bool uk : {true, false})
    for (const AbsorbPath path : {AbsorbPath::kCublas, AbsorbPath::kGemv, AbsorbPath::kSkinny})
      probe_absorbed_products(batches, uk, path, blas.get(), sms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return microbench_main("batch_invariance_probe", run, argc, argv); }
