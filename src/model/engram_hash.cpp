#include "src/model/engram_hash.h"

#include <algorithm>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "kernels/engram_hash_row.h"
#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/json_depth.h"
#include "src/core/random.h"

namespace deepinfer {

namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0 || n % 3 == 0) return n <= 3;
  for (int64_t d = 5; d * d <= n; d += 6)
    if (n % d == 0 || n % (d + 2) == 0) return false;
  return true;
}

// Offsets of each (order, head) bucket range inside its layer's table: the running sum of the layer's primes.
std::vector<int64_t> bucket_offsets(const V41TextConfig& v, const std::vector<int64_t>& primes,
                                    const std::string& source) {
  const int64_t layers = static_cast<int64_t>(v.engram_layer_ids.size()), cols = v41_engram_columns(v);
  std::vector<int64_t> offsets(primes.size());
  for (int64_t e = 0; e < layers; ++e) {
    int64_t total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      offsets[e * cols + c] = total;
      total += primes[e * cols + c];
    }
    DI_INPUT_CHECK(total <= v.engram_num_embeddings[e],
                   "{}: engram layer {} hashes into {} rows, its table has {} (engram_num_embeddings)", source,
                   v.engram_layer_ids[e], total, v.engram_num_embeddings[e]);
  }
  return offsets;
}

// Bounded so that a compressed id times a multiplier stays inside int64 (as the reference bounds them).
int64_t multiplier_bound(const V41TextConfig& v) {
  return std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / v.engram_compressed_vocab_size) / 2);
}

}  // namespace

std::vector<int64_t> engram_primes(const V41TextConfig& v) {
  std::vector<int64_t> primes;
  std::set<int64_t> used;
  for (size_t e = 0; e < v.engram_layer_ids.size(); ++e)
    for (int64_t n = 0; n + 1 < v.engram_max_ngram_size; ++n) {
      int64_t p = v.engram_vocab_size - 1;
      for (int64_t h = 0; h < v.engram_n_heads; ++h) {
        do ++p;
        while (!is_prime(p) || used.contains(p));
        used.insert(p);
        primes.push_back(p);
      }
    }
  return primes;
}

void require_engram_hash(const V41TextConfig& v) {
  DI_INPUT_CHECK(v.engram_layer_ids.empty() || !v.engram_hash.compressed_ids.empty(),
                 "DeepSeek-V4.1 engram layers need the model directory's engram_hash.json (write it with "
                 "`python3 launch/engram_hash.py MODEL`), or --no-engram");
}

void read_engram_hash(const std::filesystem::path& file, V41TextConfig& v) {
  const std::string source = file.string();
  DI_INPUT_CHECK(std::filesystem::exists(file),
                 "{} is missing: the engram layers hash compressed token ids; write it with "
                 "`python3 launch/engram_hash.py {}` (from the model's tokenizer.json), or pass --no-engram",
                 source, file.parent_path().string());
  const std::string text = read_text_file(file, "engram hash tables");
  check_json_file_depth(text, source);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  DI_INPUT_CHECK(!j.is_discarded() && j.value("format", "") == "deepinfer engram hash tables 1",
                 "{}: not an engram hash file of launch/engram_hash.py (format 'deepinfer engram hash tables 1')",
                 source);
  const int64_t layers = static_cast<int64_t>(v.engram_layer_ids.size()), N = v.engram_max_ngram_size;
  EngramHashTables t;
  t.compressed_ids = j.at("compressed_ids").get<std::vector<int32_t>>();
  DI_INPUT_CHECK(static_cast<int64_t>(t.compressed_ids.size()) == v.vocab_size,
                 "{}: {} compressed ids for a vocabulary of {}", source, t.compressed_ids.size(), v.vocab_size);
  const int64_t distinct = j.at("compressed_vocab_size").get<int64_t>();
  DI_INPUT_CHECK(distinct == v.engram_compressed_vocab_size,
                 "{}: {} compressed ids, the config says engram_compressed_vocab_size = {}", source, distinct,
                 v.engram_compressed_vocab_size);
  for (int32_t id : t.compressed_ids)
    DI_INPUT_CHECK(id >= 0 && id < distinct, "{}: compressed id {} outside [0, {})", source, id, distinct);
  const auto multipliers = j.at("multipliers").get<std::vector<std::vector<int64_t>>>();
  DI_INPUT_CHECK(static_cast<int64_t>(multipliers.size()) == layers, "{}: multipliers for {} layers, the config has {}",
                 source, multipliers.size(), layers);
  for (const auto& row : multipliers) {
    DI_INPUT_CHECK(static_cast<int64_t>(row.size()) == N, "{}: {} multipliers a layer, engram_max_ngram_size is {}",
                   source, row.size(), N);
    for (int64_t m : row)
      DI_INPUT_CHECK(m > 0 && m % 2 == 1 && m <= 2 * multiplier_bound(v) + 1,
                     "{}: multiplier {} is not odd and within the overflow bound", source, m);
    t.multipliers.insert(t.multipliers.end(), row.begin(), row.end());
  }
  t.primes = engram_primes(v);
  std::vector<int64_t> file_primes;
  for (const auto& layer : j.at("primes").get<std::vector<std::vector<std::vector<int64_t>>>>())
    for (const auto& order : layer) file_primes.insert(file_primes.end(), order.begin(), order.end());
  DI_INPUT_CHECK(file_primes == t.primes,
                 "{}: its bucket primes differ from those of this config (engram_vocab_size, engram_n_heads, "
                 "engram_max_ngram_size or the layers changed since it was written)",
                 source);
  t.offsets = bucket_offsets(v, t.primes, source);
  v.engram_hash = std::move(t);
}

void dummy_engram_hash(V41TextConfig& v) {
  EngramHashTables t;
  t.compressed_ids.resize(v.vocab_size);
  for (int64_t i = 0; i < v.vocab_size; ++i)
    t.compressed_ids[i] = static_cast<int32_t>(i % v.engram_compressed_vocab_size);
  const auto bound = static_cast<uint64_t>(multiplier_bound(v));
  for (size_t e = 0; e < v.engram_layer_ids.size(); ++e)
    for (int64_t k = 0; k < v.engram_max_ngram_size; ++k)
      t.multipliers.push_back(
          static_cast<int64_t>(splitmix64(10007 * v.engram_layer_ids[e] + static_cast<uint64_t>(k)) % bound) * 2 + 1);
  t.primes = engram_primes(v);
  t.offsets = bucket_offsets(v, t.primes, "dummy engram tables");
  v.engram_hash = std::move(t);
}

std::vector<int32_t> engram_hash_sources(const V41TextConfig& v, const ForwardBatch& batch) {
  const int64_t N = v.engram_max_ngram_size;
  std::vector<int32_t> sources;
  sources.reserve(batch.num_tokens() * N);
  int64_t first_row = 0;
  for (const SequenceChunk& seq : batch.sequences) {
    const int64_t earlier = static_cast<int64_t>(seq.earlier_tokens.size());
    DI_CHECK(earlier >= std::min(seq.num_cached, N - 1),
             "engram hashing needs the {} tokens before position {}; the batch carries {}",
             std::min(seq.num_cached, N - 1), seq.num_cached, earlier);
    for (int64_t pos = seq.num_cached; pos < seq.num_cached + seq.num_new; ++pos) {
      for (int64_t at = pos; at > pos - N; --at) {
        if (at < 0) {
          sources.push_back(kEngramPad);
        } else if (at >= seq.num_cached) {
          sources.push_back(kEngramFreshRow - static_cast<int32_t>(first_row + at - seq.num_cached));
        } else {
          const int32_t token = seq.earlier_tokens[earlier - (seq.num_cached - at)];
          DI_CHECK(token >= 0 && token < v.vocab_size, "token id {} outside the vocabulary", token);
          sources.push_back(token);
        }
      }
    }
    first_row += seq.num_new;
  }
  return sources;
}

std::vector<int64_t> engram_rows(const V41TextConfig& v, const ForwardBatch& batch) {
  const EngramHashTables& t = v.engram_hash;
  const int64_t layers = static_cast<int64_t>(v.engram_layer_ids.size()), T = batch.num_tokens();
  DI_CHECK(static_cast<int64_t>(t.compressed_ids.size()) == v.vocab_size, "the engram hash tables are not loaded");
  for (const int32_t token : batch.token_ids)
    DI_CHECK(token >= 0 && token < v.vocab_size, "token id {} outside the vocabulary", token);
  const std::vector<int32_t> sources = engram_hash_sources(v, batch);
  std::vector<int64_t> rows(T * layers * v41_engram_columns(v));
  for (int64_t row = 0; row < T; ++row)
    engram_hash_row(row, sources.data(), batch.token_ids.data(), t.compressed_ids.data(),
                    t.compressed_ids[v.engram_pad_id], t.multipliers.data(), t.primes.data(), t.offsets.data(), T,
                    layers, static_cast<int>(v.engram_max_ngram_size), v.engram_n_heads, rows.data());
  return rows;
}

}  // namespace deepinfer
