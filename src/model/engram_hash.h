// DeepSeek-V4.1's engram hashing: which table rows each new token of a forward reads, per engram layer.
//
// A token at position i of its sequence stands for the n-grams ending there, n = 2..max_ngram: the compressed ids
// c_{i-k} (k < n; the compressed pad id before the sequence start) are multiplied by the layer's odd multipliers
// m_k, XOR-ed over k < n, and each head h of order n takes that hash modulo its own prime p(n, h) plus the offset
// of its bucket range in the layer's table. A row per (order, head): columns (n - 2) * n_heads + h.
//
// The compressed ids and multipliers come from the model directory's engram_hash.json (launch/engram_hash.py
// writes it from the tokenizer, with transformers' semantics); the primes are recomputed here from the config
// and must equal the file's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "src/model/forward_batch.h"
#include "src/model/v41/v41_config.h"

namespace deepinfer {

// Per engram layer, per order, per head: the next prime above engram_vocab_size - 1 that no earlier (layer,
// order, head) took, flattened [layers][max_ngram - 1][n_heads].
std::vector<int64_t> engram_primes(const V41TextConfig& v);

// InputError unless v.engram_hash is loaded where the model has engram layers (both backends' constructors).
void require_engram_hash(const V41TextConfig& v);

// Reads `file` into v.engram_hash (InputError naming the file for a missing or inconsistent one).
void read_engram_hash(const std::filesystem::path& file, V41TextConfig& v);
// Tables for dummy weights: compressed id = token id mod the compressed vocabulary, multipliers from a fixed
// seed (the hash then spreads like the real one; its values mean nothing).
void dummy_engram_hash(V41TextConfig& v);

// rows[(e * T + t) * columns + c]: the table row of column c of engram layer e for new token t of `batch` (T new
// tokens, columns = (max_ngram - 1) * n_heads): each layer's rows one contiguous [T, columns] gather. Each sequence's tokens before its new ones come from its
// earlier_tokens, which must hold at least the max_ngram - 1 before the first new token (or all of them).
std::vector<int64_t> engram_rows(const V41TextConfig& v, const ForwardBatch& batch);

// Per new token of `batch`, its n-gram sources (kernels/engram_hash_row.h) [T, max_ngram]: the sequence's earlier
// tokens by value, the step's own rows by index (their tokens may be written on the device), a pad before the start.
// What engram_rows hashes, and what the CUDA model uploads to hash on the device (cuda::engram_hash_rows).
std::vector<int32_t> engram_hash_sources(const V41TextConfig& v, const ForwardBatch& batch);

}  // namespace deepinfer
