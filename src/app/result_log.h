// generate's durable output: results appended as they finish, one whole line each, synced at a bounded interval,
// and read back to resume a job that was killed.
//  - A line is written by one write() as soon as its request finishes, so a killed process (kill -9, a node that
//    stays up) loses only the requests still in flight; an fdatasync every `sync_interval_s` seconds (and at the
//    end) bounds what a lost node or power loses to that interval's lines.
//  - A kill inside a write leaves a torn last line (no newline): resume_output() cuts it off, and its request runs
//    again. A damaged line anywhere else is not a kill's doing: it is refused, naming the line.
//  - Requests are known by a key (request_key / result_key): an OpenAI line's custom_id, else the id's JSON text; a
//    line that is no JSON object, by its place (its error record: "id": null, "request": the ordinal), so that it
//    never stands for a request of that id; the sets of keys hold 64-bit hashes of them, 8 bytes a request.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "src/app/openai_batch.h"

namespace deepinfer::app {

// The key of a request line (JSON parsed, not yet read as a request): its custom_id (OpenAI lines, when a string),
// its "id", or the ordinal, which is the id a line without one gets; a line that is no JSON object (unparsed: a
// discarded value) has a key of its place, which no id has.
std::string request_key(const nlohmann::json& line, int64_t ordinal);
// The key of a result line in the output (its custom_id, else its id; an unreadable line's record, its place).
std::string result_key(const nlohmann::json& result);
uint64_t key_hash(std::string_view key);  // 64-bit FNV-1a
// A line parsed without exceptions: discarded (is_discarded()) when it is malformed or nested deeper than the
// inputs' bound (core/json_depth.h), so that no reading of a hostile line recurses without end.
nlohmann::json parse_line_quietly(std::string_view text);

// A set of key hashes: add them all, seal, then look up (a sorted vector: 8 bytes a key).
class KeySet {
 public:
  void add(uint64_t hash) { hashes_.push_back(hash); }
  void seal();  // sorts; the duplicates stay (see duplicates())
  bool contains(uint64_t hash) const;
  std::vector<uint64_t> duplicates() const;  // the hashes added more than once (after seal)
  int64_t size() const { return static_cast<int64_t>(hashes_.size()); }

 private:
  std::vector<uint64_t> hashes_;
};

// What an output file already holds, for --resume.
struct ExistingOutput {
  KeySet done;              // the keys of its results (error records too: those requests are done)
  int64_t lines = 0;
  int64_t failed = 0;      // of them, error records
  int64_t torn_bytes = 0;  // the torn last line cut off (0: none)
};
// Reads `path` (missing or empty: nothing yet) and cuts a torn last line off it. InputError naming the file and
// line for a line that is not a JSON object with an id or custom_id.
ExistingOutput resume_output(const std::filesystem::path& path);

class ResultLog {
 public:
  // Opens `path` for appending (append) or anew (truncated); a device or pipe (/dev/stdout) is written in place,
  // without syncs.
  ResultLog(const std::filesystem::path& path, bool append, double sync_interval_s);
  ~ResultLog();  // syncs and closes (errors logged: the destructor cannot throw)
  ResultLog(const ResultLog&) = delete;
  ResultLog& operator=(const ResultLog&) = delete;

  void append(const nlohmann::json& line);  // one write() of the line and its newline
  void sync_if_due();                       // an fdatasync when the interval has passed
  void sync();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool regular_ = true;
  double sync_interval_s_;
  std::chrono::steady_clock::time_point last_sync_;
  bool unsynced_ = false;
  int64_t lines_written_ = 0;
  int64_t torn_write_at_ = 0;  // fault injection (DEEPINFER_FAULT_TORN_WRITE=N): die inside the N-th write
};

}  // namespace deepinfer::app
