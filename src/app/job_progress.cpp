#include "src/app/job_progress.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

#include "src/core/files.h"

namespace deepinfer::app {

namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

}  // namespace

JobProgress::JobProgress(int64_t total, int64_t done_before, int64_t failed_before, double interval_s,
                         std::filesystem::path status_file, std::string output)
    : total_(total), done_before_(done_before), failed_before_(failed_before), interval_s_(interval_s),
      status_file_(std::move(status_file)), output_(std::move(output)), start_(std::chrono::steady_clock::now()),
      last_report_(start_) {
  write_status("running");  // from the start: a script finds the job's state before its first interval
}

void JobProgress::finished(int64_t prompt_tokens, int64_t generated_tokens) {
  ++done_;
  prompt_tokens_ += prompt_tokens;
  generated_tokens_ += generated_tokens;
}

void JobProgress::failed() {
  ++done_;
  ++failed_;
}

void JobProgress::tick() {
  if (interval_s_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_report_).count() < interval_s_) return;
  last_report_ = now;
  report("running");
}

void JobProgress::end(const std::string& state) {
  ended_ = true;
  report(state);
}

JobProgress::~JobProgress() {
  if (ended_) return;
  try {  // the job is failing (an error unwinds through it): the file must not go on saying "running"
    report("failed");
  } catch (const std::exception& e) {
    spdlog::warn("the status file could not be marked failed: {}", e.what());
  }
}

JobProgress::Figures JobProgress::figures() const {
  Figures f;
  f.elapsed = std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  f.done = done_before_ + done_;
  f.left = std::max<int64_t>(0, total_ - f.done);
  f.rate = done_ / f.elapsed;
  f.eta = f.rate > 0 ? f.left / f.rate : -1.0;
  return f;
}

void JobProgress::report(const std::string& state) {
  const Figures f = figures();
  spdlog::info("progress: {} / {} requests ({:.1f}%), {} failed; {:.1f} requests/s, {:.1f} prompt tok/s, {:.1f} "
               "generated tok/s; elapsed {}, {}{}", f.done, total_, total_ > 0 ? 100.0 * f.done / total_ : 100.0,
               failed_before_ + failed_, f.rate, prompt_tokens_ / f.elapsed, generated_tokens_ / f.elapsed,
               clock_text(f.elapsed), f.eta < 0 ? "time left unknown" : "left ~" + clock_text(f.eta),
               state == "running" ? "" : fmt::format(" ({})", state));
  write_status(state);
}

void JobProgress::write_status(const std::string& state) {
  if (status_file_.empty()) return;
  const Figures f = figures();
  const nlohmann::json status = {{"state", state},
                                 {"output", output_},
                                 {"total", total_},
                                 {"done", f.done},
                                 {"remaining", f.left},
                                 {"done_before_this_run", done_before_},
                                 {"failed", failed_before_ + failed_},  // (in the whole output)
                                 {"prompt_tokens", prompt_tokens_},
                                 {"generated_tokens", generated_tokens_},
                                 {"requests_per_s", f.rate},
                                 {"prompt_tokens_per_s", prompt_tokens_ / f.elapsed},
                                 {"generated_tokens_per_s", generated_tokens_ / f.elapsed},
                                 {"elapsed_s", f.elapsed},
                                 {"eta_s", f.eta < 0 ? nlohmann::json() : nlohmann::json(f.eta)},
                                 {"updated_unix", static_cast<int64_t>(std::time(nullptr))}};
  write_file_whole(status_file_, status.dump(2) + "\n");
}

}  // namespace deepinfer::app
