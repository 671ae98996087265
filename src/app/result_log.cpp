#include "src/app/result_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "src/core/check.h"
#include "src/core/json_depth.h"

namespace deepinfer::app {

std::string request_key(const nlohmann::json& line, int64_t ordinal) {
  // A line that is no JSON object has no id to give: its place keys it, apart from every id (a request of "id": 0
  // and a malformed first line are two requests).
  if (!line.is_object()) return "l:" + std::to_string(ordinal);
  if (line.contains("custom_id") && line["custom_id"].is_string()) return "c:" + line["custom_id"].get<std::string>();
  return "i:" + (line.contains("id") ? line["id"] : nlohmann::json(ordinal)).dump();
}

std::string result_key(const nlohmann::json& result) {
  if (result.contains("custom_id") && result["custom_id"].is_string()) return "c:" + result["custom_id"].get<std::string>();
  if (result.value("id", nlohmann::json()).is_null() && result.contains("request"))  // an unreadable line's record
    return "l:" + result["request"].dump();
  return "i:" + result.at("id").dump();
}

uint64_t key_hash(std::string_view key) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

nlohmann::json parse_line_quietly(std::string_view text) {
  try {
    check_json_depth(text, "");
  } catch (const InputError&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

void KeySet::seal() { std::sort(hashes_.begin(), hashes_.end()); }

bool KeySet::contains(uint64_t hash) const { return std::binary_search(hashes_.begin(), hashes_.end(), hash); }

std::vector<uint64_t> KeySet::duplicates() const {
  std::vector<uint64_t> out;
  for (size_t i = 1; i < hashes_.size(); ++i)
    if (hashes_[i] == hashes_[i - 1] && (out.empty() || out.back() != hashes_[i])) out.push_back(hashes_[i]);
  return out;
}

ExistingOutput resume_output(const std::filesystem::path& path) {
  ExistingOutput existing;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return existing;
  DI_INPUT_CHECK(std::filesystem::is_regular_file(path, ec), "--resume: --output '{}' is not a regular file",
                 path.string());
  {  // (ResultLog holds the same lock while it writes)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const bool free = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0) ::close(fd);
    DI_INPUT_CHECK(free, "--output '{}' is being written by another process (a job still running, or one not yet "
                   "gone): stop it before resuming", path.string());
  }
  std::ifstream in(path, std::ios::binary);
  DI_INPUT_CHECK(in.good(), "--resume: cannot read --output '{}'", path.string());
  std::string text;
  int64_t whole_bytes = 0;  // the file up to the end of its last whole line
  while (std::getline(in, text)) {
    if (in.eof()) {  // no newline after it: a write the kill cut short
      existing.torn_bytes = static_cast<int64_t>(text.size());
      break;
    }
    whole_bytes += static_cast<int64_t>(text.size()) + 1;
    ++existing.lines;
    const nlohmann::json line = parse_line_quietly(text);
    DI_INPUT_CHECK(line.is_object() && (line.contains("id") || line.contains("custom_id")),
                   "--resume: {}:{} is not a result line (a JSON object with an id or custom_id): the file is "
                   "damaged, or not this job's output",
                   path.string(), existing.lines);
    existing.done.add(key_hash(result_key(line)));
    if (line.contains("error") && !line["error"].is_null()) ++existing.failed;
  }
  in.close();
  if (existing.torn_bytes > 0) {
    spdlog::warn("--resume: {} ends in a torn line ({} bytes, a write cut short by the kill): dropped, its request "
                 "runs again", path.string(), existing.torn_bytes);
    DI_CHECK(::truncate(path.c_str(), whole_bytes) == 0, "cannot cut the torn last line off '{}': {}", path.string(),
             std::strerror(errno));
  }
  existing.done.seal();
  return existing;
}

ResultLog::ResultLog(const std::filesystem::path& path, bool append, double sync_interval_s)
    : path_(path), sync_interval_s_(sync_interval_s), last_sync_(std::chrono::steady_clock::now()) {
  struct stat st {};
  regular_ = ::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode);
  const int flags = O_WRONLY | O_CLOEXEC | (regular_ ? O_CREAT | (append ? O_APPEND : O_TRUNC) : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  DI_CHECK(fd_ >= 0, "cannot open --output '{}': {}", path.string(), std::strerror(errno));
  // One writer at a time: a job resumed while a process of the killed one still runs would interleave its lines.
  DI_INPUT_CHECK(!regular_ || ::flock(fd_, LOCK_EX | LOCK_NB) == 0,
                 "--output '{}' is being written by another process (a job still running, or one not yet gone): "
                 "stop it before resuming", path.string());
  if (const char* n = std::getenv("DEEPINFER_FAULT_TORN_WRITE")) torn_write_at_ = std::atoll(n);
}

ResultLog::~ResultLog() {
  if (regular_ && unsynced_ && ::fdatasync(fd_) != 0)
    spdlog::error("syncing --output '{}' failed: {}", path_.string(), std::strerror(errno));
  ::close(fd_);
}

void ResultLog::append(const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  ++lines_written_;
  if (lines_written_ == torn_write_at_) {  // a kill inside the write, for the tests
    spdlog::error("fault injection: the output's line {} is written half, then the process dies "
                  "(DEEPINFER_FAULT_TORN_WRITE)", lines_written_);
    spdlog::default_logger()->flush();
    [[maybe_unused]] const ssize_t half = ::write(fd_, text.data(), text.size() / 2);
    std::_Exit(9);
  }
  // A write that fails part-way (a full disk) is cut back off, so that the file holds whole lines only.
  const off_t before = regular_ ? ::lseek(fd_, 0, SEEK_END) : 0;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      if (regular_ && before >= 0 && done > 0 && ::ftruncate(fd_, before) != 0)
        spdlog::warn("could not cut the part-written line off --output '{}'", path_.string());
      throw Error(fmt::format("writing --output '{}' failed: {}", path_.string(), std::strerror(error)));
    }
    done += static_cast<size_t>(n);
  }
  unsynced_ = true;
  sync_if_due();
}

void ResultLog::sync_if_due() {
  if (!unsynced_) return;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_sync_).count();
  if (since >= sync_interval_s_) sync();
}

void ResultLog::sync() {
  if (regular_ && unsynced_)
    DI_CHECK(::fdatasync(fd_) == 0, "syncing --output '{}' failed: {}", path_.string(), std::strerror(errno));
  unsynced_ = false;
  last_sync_ = std::chrono::steady_clock::now();
}

}  // namespace deepinfer::app
