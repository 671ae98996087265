// Encode speed of the C++ tokenizer on one thread and with segment parallelism (the text between special tokens
// on several threads), on given documents: each one encoded once to warm up, then `repeats` times; the median
// per document, summed over the documents, as MB/s and tokens/s. Prints one JSON line.
//
//   tokenizer_bench TOKENIZER_JSON CORPUS_JSONL [--min-bytes N] [--threads T] [--repeats R]
//
// The documents are the corpus lines whose "text" has at least N bytes (default 20000: the long documents of
// tests/fixtures/tokenizer). launch/lab/tokenizer_speed.py times Hugging Face tokenizers on the same documents.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/text/bpe_tokenizer.h"

namespace {

template <class F>
double median_seconds(int repeats, F&& f) {
  f();  // warm-up
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS_JSONL [--min-bytes N] [--threads T] [--repeats R]\n", argv[0]);
    return 2;
  }
  size_t min_bytes = 20000;
  int threads = 2, repeats = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--min-bytes") min_bytes = std::stoul(argv[i + 1]);
    else if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
  }
  const auto tokenizer = deepinfer::text::BpeTokenizer::load(argv[1]);
  std::vector<std::string> docs;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("ids") && j.at("text").get<std::string>().size() >= min_bytes) docs.push_back(j["text"]);
  }
  size_t bytes = 0, tokens = 0;
  double serial = 0.0, parallel = 0.0;
  for (const std::string& doc : docs) {
    bytes += doc.size();
    tokens += tokenizer.encode(doc).size();
    serial += median_seconds(repeats, [&] { (void)tokenizer.encode(doc); });
    parallel += median_seconds(repeats, [&] { (void)tokenizer.encode_parallel(doc, threads); });
  }
  std::printf("{\"documents\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"one_thread_s\": %.6f, \"one_thread_MB_s\": %.2f, "
              "\"one_thread_tokens_s\": %.0f, \"threads\": %d, \"parallel_s\": %.6f, \"parallel_MB_s\": %.2f}\n",
              docs.size(), bytes, tokens, serial, bytes / serial / 1e6, tokens / serial, threads, parallel,
              bytes / parallel / 1e6);
  return 0;
}
