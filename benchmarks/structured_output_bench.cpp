// The per-step cost of structured output's masking (issue #30) at batch B, with DeepSeek's tokenizer (129,280 ids):
//   - compile: a JSON Schema, a regex and any-JSON compiled against the vocabulary (once per distinct constraint);
//   - host: the step's masks (one xgrammar FillNextTokenBitmask per constrained row: one after the other, and spread
//     over the host's threads as Engine::token_masks does), with the B sequences' matchers spread over the states of
//     a valid document (each advanced by a different number of its tokens), medians of `repeats` steps after warm-up;
//   - device (CUDA builds on a GPU): the masks' upload and apply_token_bitmask on [B, vocab] fp32 logits, and the
//     sampling that follows (argmax, and the sorted top-p sampler), masked and not, medians by CUDA events.
// Prints one JSON line per (constraint, B).
//
//   structured_output_bench TOKENIZER_JSON [--batches 1,64,256] [--repeats 50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "benchmarks/host_timing.h"
#include "src/engine/structured_output.h"
#include "src/model/causal_lm.h"
#include "src/text/bpe_tokenizer.h"

#ifdef DEEPINFER_HAVE_CUDA
#include "benchmarks/microbench.h"
#include "kernels/cuda/sampling.cuh"
#endif

namespace {

using namespace deepinfer;

constexpr int64_t kVocab = 129280;

struct Case {
  std::string name;
  OutputConstraint constraint;
  std::string document;  // a valid output, whose tokens place the matchers
};

#ifdef DEEPINFER_HAVE_CUDA
// The device side of a masked sampling step at batch B: upload, mask, sample; and the same sampling unmasked.
nlohmann::json device_costs(const TokenMasks& masks, int64_t rows, int repeats) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return nullptr;
  const int64_t words = masks.words;
  std::vector<float> host_logits(rows * kVocab);
  for (size_t i = 0; i < host_logits.size(); ++i) host_logits[i] = static_cast<float>((i * 2654435761u) % 1000) / 100.0f;
  float *logits = nullptr, *scratch = nullptr;
  uint32_t* bits = nullptr;
  uint8_t *masked = nullptr, *workspace = nullptr, *params = nullptr;
  int32_t* out = nullptr;
  const size_t workspace_bytes = cuda::sample_workspace_bytes(rows, kVocab);
  DI_CUDA_CHECK(cudaMalloc(&logits, host_logits.size() * 4));
  DI_CUDA_CHECK(cudaMalloc(&scratch, host_logits.size() * 4));
  DI_CUDA_CHECK(cudaMalloc(&bits, rows * words * 4));
  DI_CUDA_CHECK(cudaMalloc(&masked, rows));
  DI_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  DI_CUDA_CHECK(cudaMalloc(&params, rows * sizeof(cuda::SamplingRow)));
  DI_CUDA_CHECK(cudaMalloc(&out, rows * 4));
  DI_CUDA_CHECK(cudaMemcpy(logits, host_logits.data(), host_logits.size() * 4, cudaMemcpyHostToDevice));
  std::vector<cuda::SamplingRow> rows_params(rows, cuda::SamplingRow{0.8f, 0.95f, 0, 7, 100});
  DI_CUDA_CHECK(cudaMemcpy(params, rows_params.data(), rows * sizeof(cuda::SamplingRow), cudaMemcpyHostToDevice));
  const auto* sampling = reinterpret_cast<const cuda::SamplingRow*>(params);
  const auto fresh = [&] {  // the step's logits (a device copy, so that masking does not compound)
    DI_CUDA_CHECK(cudaMemcpyAsync(scratch, logits, host_logits.size() * 4, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
  };
  const auto upload_and_mask = [&] {
    DI_CUDA_CHECK(cudaMemcpyAsync(bits, masks.bits.data(), masks.bits.size() * 4, cudaMemcpyHostToDevice,
                                  cudaStreamPerThread));
    DI_CUDA_CHECK(cudaMemcpyAsync(masked, masks.masked.data(), rows, cudaMemcpyHostToDevice, cudaStreamPerThread));
    cuda::apply_token_bitmask(scratch, rows, kVocab, bits, words, masked, cudaStreamPerThread);
  };
  const double copy = median_ms(repeats, fresh);
  nlohmann::json j;
  j["mask_upload_and_apply_ms"] = median_ms(repeats, [&] { fresh(); upload_and_mask(); }) - copy;
  j["argmax_ms"] = median_ms(repeats, [&] { fresh(); cuda::argmax_rows(scratch, rows, kVocab, out, nullptr, cudaStreamPerThread); }) - copy;
  j["masked_argmax_ms"] = median_ms(repeats, [&] {
    fresh();
    upload_and_mask();
    cuda::argmax_rows(scratch, rows, kVocab, out, nullptr, cudaStreamPerThread);
  }) - copy;
  j["top_p_sample_ms"] = median_ms(repeats, [&] {
    fresh();
    cuda::sample_rows(scratch, rows, kVocab, sampling, out, workspace, workspace_bytes, cudaStreamPerThread);
  }) - copy;
  j["masked_top_p_sample_ms"] = median_ms(repeats, [&] {
    fresh();
    upload_and_mask();
    cuda::sample_rows(scratch, rows, kVocab, sampling, out, workspace, workspace_bytes, cudaStreamPerThread);
  }) - copy;
  DI_CUDA_CHECK(cudaGetLastError());
  for (void* p : std::initializer_list<void*>{logits, scratch, bits, masked, workspace, params, out}) cudaFree(p);
  return j;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON [--batches 1,64,256] [--repeats 50]\n", argv[0]);
    return 2;
  }
  std::vector<int64_t> batches = {1, 64, 256};
  int repeats = 50;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
    if (flag == "--batches") {
      batches.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string b; std::getline(list, b, ',');) batches.push_back(std::stoll(b));
    }
  }
  const auto tokenizer = text::BpeTokenizer::load(argv[1]);
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_special(id) && !tokenizer.is_added(id)) bytes[id] = tokenizer.token_bytes(id);
  const std::vector<int32_t> eos = {1};
  StructuredOutput so(bytes, kVocab, eos, GrammarLimits{.compile_timeout_s = 600.0, .total_compile_s = 1e9});

  const std::string schema = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"},
      "tags": {"type": "array", "items": {"type": "string"}},
      "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                  "required": ["street", "city"], "additionalProperties": false}},
      "required": ["name", "age", "email", "tags", "address"], "additionalProperties": false})";
  std::vector<Case> cases;
  const auto add = [&](std::string name, OutputConstraint::Kind kind, std::string text, std::string document) {
    Case c;
    c.name = std::move(name);
    c.constraint.kind = kind;
    c.constraint.text = std::move(text);
    c.document = std::move(document);
    cases.push_back(std::move(c));
  };
  add("json_schema", OutputConstraint::Kind::kJsonSchema, schema,
      R"({"name": "Ada Lovelace", "age": 36, "email": "ada@analytical.com", "tags": ["math", "poetry", "engines"], )"
      R"("address": {"street": "12 St James's Square", "city": "London"}})");
  add("json_object", OutputConstraint::Kind::kJsonObject, "",
      R"({"model": "deepseek", "layers": [1, 2, 3], "ok": true, "note": "free-form text inside a string value"})");
  add("regex", OutputConstraint::Kind::kRegex, "[A-Z][a-z]+ [0-9]{4}-[0-9]{2}-[0-9]{2} (OK|FAIL): [a-z ]+\\.",
      "Report 2026-12-02 OK: all checks passed and nothing failed.");

  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    so.compile(c.constraint, c.name);
    const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const std::vector<int32_t> doc = tokenizer.encode(c.document);
    for (const int64_t B : batches) {
      std::vector<Request> requests(B);
      std::vector<Sequence> seqs(B);
      for (int64_t i = 0; i < B; ++i) {
        requests[i].id = i;
        requests[i].prompt_token_ids = {0};
        requests[i].constraint = c.constraint;
        Sequence& s = seqs[i];
        s.request = &requests[i];
        s.tokens = {0};
        s.num_prompt_tokens = 1;
        s.status = SequenceStatus::kRunning;
        // Spread over the document's states: sequence i has emitted (i * 7) % |doc| of its tokens.
        const int64_t emitted = (i * 7) % static_cast<int64_t>(doc.size());
        s.tokens.insert(s.tokens.end(), doc.begin(), doc.begin() + emitted);
        so.start(s);
      }
      TokenMasks masks;
      masks.words = so.mask_words();
      masks.bits.assign(B * masks.words, 0);
      masks.masked.assign(B, 1);
      const double host_ms = host_median_ms(repeats, [&] {
        for (int64_t i = 0; i < B; ++i) so.fill_masks(seqs[i], {}, masks.bits.data() + i * masks.words);
      });
      std::vector<const Sequence*> all;
      for (const Sequence& s : seqs) all.push_back(&s);
      const double threaded_ms = host_median_ms(repeats, [&] { so.fill_masks(all, masks.bits.data()); });
      nlohmann::json line = {{"constraint", c.name}, {"batch", B}, {"vocab", kVocab}, {"compile_ms", compile_ms},
                             {"host_fill_masks_ms", host_ms}, {"host_fill_masks_threaded_ms", threaded_ms},
                             {"host_threads", omp_get_max_threads()}, {"document_tokens", doc.size()}};
#ifdef DEEPINFER_HAVE_CUDA
      line["device"] = device_costs(masks, B, repeats);
#endif
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      for (Sequence& s : seqs) {  // drop the matchers
        s.status = SequenceStatus::kFinished;
        so.advance(s);
      }
    }
  }
  return 0;
}
