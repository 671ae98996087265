#include "src/engine/kv_store.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <regex>
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

// A writer renames its temporary within moments of creating it (one block, written whole); one older than this was
// left by a writer that died (killed, its host lost). Age rather than the writer's pid decides, since the ranks of
// other hosts share the directory and their pids mean nothing here.
constexpr auto kStalePartialAge = std::chrono::minutes(10);

// Removes the temporaries (save()'s ".<hash>.partial.<pid>.<random>") older than kStalePartialAge; returns how many.
int64_t remove_stale_partials(const std::filesystem::path& dir) {
  static const std::regex kPartial(R"(\.[0-9a-f]{16}\.partial\.[0-9]+\.[0-9a-f]{16})");
  const auto now = std::filesystem::file_time_type::clock::now();
  int64_t removed = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    std::error_code entry_error;
    if (!entry.is_regular_file(entry_error) || !std::regex_match(entry.path().filename().string(), kPartial)) continue;
    const auto written = entry.last_write_time(entry_error);
    if (entry_error || now - written < kStalePartialAge) continue;
    if (std::filesystem::remove(entry.path(), entry_error)) ++removed;  // another rank may have removed it first
  }
  return removed;
}

}  // namespace

KvStore::KvStore(std::filesystem::path dir, std::string model_key, int64_t num_layers, int64_t entry_dim,
                 int64_t block_size)
    : dir_(std::move(dir)), model_key_(checksum(model_key.data(), model_key.size())), num_layers_(num_layers), entry_dim_(entry_dim),
      block_size_(block_size), rng_(std::random_device{}()) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  DI_INPUT_CHECK(std::filesystem::is_directory(dir_), "--kv-store '{}' is not a directory and cannot be made one{}",
                 dir_.string(), error ? ": " + error.message() : "");
  if (const int64_t removed = remove_stale_partials(dir_); removed > 0)
    spdlog::info("--kv-store: removed {} unfinished block file(s) older than {} minutes from {} (writers that died)",
                 removed, std::chrono::duration_cast<std::chrono::minutes>(kStalePartialAge).count(), dir_.string());
}

std::filesystem::path KvStore::path_of(uint64_t hash) const {
  return dir_ / fmt::format("{:016x}-{:016x}.kvblock", model_key_, hash);
}

bool KvStore::has(uint64_t hash) const {
  std::error_code error;
  return std::filesystem::is_regular_file(path_of(hash), error);
}

bool KvStore::load(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens,
                   std::vector<float>& entries) const {
  const std::filesystem::path path = path_of(hash);
  const size_t values = static_cast<size_t>(num_layers_ * block_size_ * entry_dim_);
  const size_t body = sizeof(Header) + tokens.size() * sizeof(int32_t) + values * sizeof(float);
  // Only a regular file, opened without blocking: a named pipe or a device in its place is a miss, not a hang.
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return false;
  const std::optional<std::string> read = read_regular_file_if_any(path, body + sizeof(uint64_t));
  if (!read) {
    spdlog::warn("--kv-store: {} is not a readable regular file of at most a block's size; ignored (the block is "
                 "computed)", path.string());
    return false;
  }
  const std::string& bytes = *read;
  const bool whole = bytes.size() == body + sizeof(uint64_t);
  if (!whole) {
    spdlog::warn("--kv-store: {} is damaged or belongs to another prefix; ignored (the block is computed)",
                 path.string());
    return false;
  }
  Header header{};
  std::memcpy(&header, bytes.data(), sizeof(Header));
  uint64_t stored_sum = 0;
  std::memcpy(&stored_sum, bytes.data() + body, sizeof(uint64_t));
  const bool valid = std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 && header.hash == hash &&
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
  std::error_code error;
  if (!writable_ || std::filesystem::exists(path, error)) return;
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
