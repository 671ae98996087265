// What a long generate job has done, for the people and scripts that watch it: world rank 0 logs one line every
// `interval_s` (0: never) and replaces the status file (JSON, written whole and renamed) at the same interval and
// at the end. The file's "state" is "running", then "complete" once every request has its line in the output,
// or "stopped" (a signal: the job exits kExitRequeue to be resumed) or "failed".
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

namespace deepinfer::app {

class JobProgress {
 public:
  // total: requests in the input; done_before: of them, those the output already held (--resume), failed_before
  // of those as error records. The status file is written at once ("running"), then every interval.
  JobProgress(int64_t total, int64_t done_before, int64_t failed_before, double interval_s,
              std::filesystem::path status_file, std::string output);

  void finished(int64_t prompt_tokens, int64_t generated_tokens);  // a request's result was written
  void failed();                                                     // a request's error record was written
  void tick();  // the line and the file, when the interval has passed
  void end(const std::string& state);  // the last line and file
  // Never ended (an error on world rank 0 unwinds the job): the last line and file say "failed". A process killed
  // outright, or one a peer's failure aborts, leaves "running": a script tells those by the job's exit.
  ~JobProgress();
  JobProgress(const JobProgress&) = delete;
  JobProgress& operator=(const JobProgress&) = delete;

 private:
  struct Figures {
    double elapsed, rate, eta;  // eta < 0: unknown
    int64_t done, left;
  };
  Figures figures() const;
  void report(const std::string& state);        // the line and the file
  void write_status(const std::string& state);  // the file

  int64_t total_, done_before_, failed_before_;
  int64_t done_ = 0, failed_ = 0, prompt_tokens_ = 0, generated_tokens_ = 0;  // this run's
  double interval_s_;
  std::filesystem::path status_file_;
  std::string output_;
  std::chrono::steady_clock::time_point start_, last_report_;
  bool ended_ = false;
};

}  // namespace deepinfer::app
