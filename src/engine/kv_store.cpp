#include "src/engine/kv_store.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string_view>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/random.h"

namespace deepinfer {

namespace {

constexpr char kMagic[8] = {'D', 'I', 'K', 'V', 'B', 'L', 'K', '1'};

struct Header {
  char magic[8];
  uint64_t hash, parent_hash, model_key;
  int64_t num_layers, entry_dim, block_size;
};

uint64_t checksum(const char* data, size_t n) { return splitmix64(fnv1a64(std::string_view(data, n))); }

}  // namespace

KvStore::KvStore(std::filesystem::path dir, std::string model_key, int64_t num_layers, int64_t entry_dim,
                 int64_t block_size)
    : dir_(std::move(dir)), model_key_(checksum(model_key.data(), model_key.size())), num_layers_(num_layers), entry_dim_(entry_dim),
      block_size_(block_size), rng_(std::random_device{}()) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  DI_INPUT_CHECK(std::filesystem::is_directory(dir_), "--kv-store '{}' is not a directory and cannot be made one{}",
                 dir_.string(), error ? ": " + error.message() : "");
}

std::filesystem::path KvStore::path_of(uint64_t hash) const {
  return dir_ / fmt::format("{:016x}-{:016x}.kvblock", model_key_, hash);
}

bool KvStore::has(uint64_t hash) const {
  std::error_code error;
  return std::filesystem::exists(path_of(hash), error);
}

bool KvStore::load(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens,
                   std::vector<float>& entries) const {
  const std::filesystem::path path = path_of(hash);
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const size_t values = static_cast<size_t>(num_layers_ * block_size_ * entry_dim_);
  const size_t body = sizeof(Header) + tokens.size() * sizeof(int32_t) + values * sizeof(float);
  std::vector<char> bytes(body + sizeof(uint64_t));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const bool whole = in.gcount() == static_cast<std::streamsize>(bytes.size()) && in.peek() == EOF;
  Header header{};
  std::memcpy(&header, bytes.data(), sizeof(Header));
  uint64_t stored_sum = 0;
  std::memcpy(&stored_sum, bytes.data() + body, sizeof(uint64_t));
  const bool valid = whole && std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 && header.hash == hash &&
                     header.parent_hash == parent_hash && header.model_key == model_key_ &&
                     header.num_layers == num_layers_ && header.entry_dim == entry_dim_ &&
                     header.block_size == block_size_ &&
                     std::memcmp(bytes.data() + sizeof(Header), tokens.data(), tokens.size_bytes()) == 0 &&
                     checksum(bytes.data(), body) == stored_sum;
  if (!valid) {
    spdlog::warn("--kv-store: {} is damaged or belongs to another prefix; ignored (the block is computed)",
                 path.string());
    return false;
  }
  entries.resize(values);
  std::memcpy(entries.data(), bytes.data() + sizeof(Header) + tokens.size_bytes(), values * sizeof(float));
  return true;
}

void KvStore::save(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens,
                   std::span<const float> entries) const {
  const std::filesystem::path path = path_of(hash);
  if (!writable_ || std::filesystem::exists(path)) return;
  DI_CHECK(static_cast<int64_t>(entries.size()) == num_layers_ * block_size_ * entry_dim_ &&
               static_cast<int64_t>(tokens.size()) == block_size_,
           "a block of {} tokens and {} values for the store", tokens.size(), entries.size());
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.hash = hash;
  header.parent_hash = parent_hash;
  header.model_key = model_key_;
  header.num_layers = num_layers_;
  header.entry_dim = entry_dim_;
  header.block_size = block_size_;
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof(Header));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
  bytes.append(reinterpret_cast<const char*>(entries.data()), entries.size_bytes());
  const uint64_t sum = checksum(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  // A name no other writer uses (ranks of other hosts may share a pid), renamed over the final one at once.
  const std::filesystem::path partial = dir_ / fmt::format(".{:016x}.partial.{}.{:016x}", hash, ::getpid(), rng_());
  // A store that cannot take the block (full, read-only, gone) is given up with one warning: blocks are still
  // computed and cached on the rank, just not stored.
  try {
    write_file_whole(partial, bytes);
    std::filesystem::rename(partial, path);
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    spdlog::warn("--kv-store: cannot write to {} ({}); this rank stores no more blocks there", dir_.string(),
                 e.what());
    writable_ = false;
  }
}

}  // namespace deepinfer
