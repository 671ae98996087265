#include "src/model/model_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/random.h"

namespace deepinfer {

namespace {

constexpr uint64_t kWholeDataBytes = uint64_t{64} << 20;
constexpr uint64_t kSampleBytes = 4096;
constexpr int kSamples = 64;
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the safetensors format's own bound

// FNV-1a, fed piece by piece (random.h's fnv1a64 takes one string).
class Digest {
 public:
  void add(std::string_view bytes) {
    for (const char c : bytes) hash_ = (hash_ ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  }
  void add_number(uint64_t value) { add(std::string_view(reinterpret_cast<const char*>(&value), sizeof value)); }
  std::string hex() const { return fmt::format("{:016x}", splitmix64(hash_)); }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

// `count` bytes of `fd` at `offset` (fewer at the end of the file).
std::string read_at(int fd, uint64_t offset, uint64_t count, const std::filesystem::path& path) {
  std::string bytes(count, '\0');
  size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd, bytes.data() + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    DI_INPUT_CHECK(n >= 0, "cannot read '{}': {}", path.string(), std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

// A shard's name, size, modification time, header, and its tensor bytes whole or sampled.
void add_shard(Digest& digest, const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  DI_INPUT_CHECK(fd >= 0, "cannot open '{}': {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("'{}' is not a regular file: a checkpoint shard must be one", path.string()));
  }
  try {
    const auto size = static_cast<uint64_t>(st.st_size);
    digest.add(path.filename().string());
    digest.add_number(size);
    digest.add_number(static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + st.st_mtim.tv_nsec);
    uint64_t header_bytes = 0;
    const std::string length = read_at(fd, 0, sizeof header_bytes, path);
    if (length.size() == sizeof header_bytes) std::memcpy(&header_bytes, length.data(), sizeof header_bytes);
    // A damaged length is the loader's to report; the digest then covers what the file holds.
    const uint64_t data_start = std::min(size, sizeof header_bytes + std::min(header_bytes, kMaxHeaderBytes));
    digest.add(read_at(fd, 0, data_start, path));
    const uint64_t data_bytes = size - data_start;
    if (data_bytes <= kWholeDataBytes) {
      digest.add(read_at(fd, data_start, data_bytes, path));
    } else {
      for (int s = 0; s < kSamples; ++s)
        digest.add(read_at(fd, data_start + (data_bytes - kSampleBytes) / (kSamples - 1) * s, kSampleBytes, path));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace

std::string model_content_digest(const std::filesystem::path& model_path) {
  Digest digest;
  std::error_code error;
  if (!std::filesystem::is_directory(model_path, error)) {
    digest.add(read_text_file(model_path, "model config"));
    return digest.hex();
  }
  for (const char* name : {"config.json", "engram_hash.json", "model.safetensors.index.json"}) {
    const std::filesystem::path file = model_path / name;
    digest.add(name);
    if (std::filesystem::exists(file, error)) digest.add(read_text_file(file, name));
  }
  std::vector<std::filesystem::path> shards;
  for (const auto& entry : std::filesystem::directory_iterator(model_path, error))
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path());
  std::sort(shards.begin(), shards.end());
  for (const std::filesystem::path& shard : shards) add_shard(digest, shard);
  return digest.hex();
}

}  // namespace deepinfer
