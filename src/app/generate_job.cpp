#include "src/app/generate_job.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <limits>
#include <optional>
#include <unordered_set>

#include "src/app/job_progress.h"
#include "src/app/request_lines.h"
#include "src/core/check.h"
#include "src/core/stop_signal.h"
#include "src/comm/mpi_util.h"

namespace deepinfer::app {

namespace {

constexpr int64_t kListedBadLines = 20;

// The key of a line as far as its JSON gives one (a malformed line: its ordinal, the id it would get).
uint64_t line_key(const std::string& text, int64_t ordinal) {
  return key_hash(request_key(parse_line_quietly(text), ordinal));
}

// One window as every rank holds it.
struct Window {
  std::vector<Request> requests;
  std::vector<OutputReading> readings;
  std::vector<BatchLineFormat> formats;  // world rank 0's
  std::vector<int64_t> ordinals;         // world rank 0's
};

enum WindowStatus : int64_t { kMore = 0, kInputDone = 1, kStopped = 2 };

}  // namespace

InputScan scan_input(const DurableJobOptions& options, const LineParser& parse) {
  InputScan scan;
  if (options.resume) {
    ExistingOutput existing = resume_output(options.output);
    scan.done = std::move(existing.done);
    scan.already_failed = existing.failed;
    if (existing.lines > 0) spdlog::info("--resume: {} holds {} results", options.output.string(), existing.lines);
  }
  RequestLines input(options.input);
  KeySet keys;
  std::vector<std::string> listed;
  RequestLines::Line line;
  while (input.next(line)) {
    ++scan.requests;
    const uint64_t key = line_key(line.text, line.ordinal);
    keys.add(key);
    if (scan.done.contains(key)) {
      ++scan.already_done;
      continue;
    }
    try {
      OutputReading reading;
      BatchLineFormat format;
      const Request request = parse(line.text, input.where(line), line.ordinal, reading, format);
      scan.constrained = scan.constrained || request.constraint.has_value();
    } catch (const InputError& e) {
      // What is not about the line (a tokenizer or chat instructions that cannot be loaded) stops the job once.
      if (!std::string_view(e.what()).starts_with(input.where(line))) throw;
      ++scan.bad;
      if (static_cast<int64_t>(listed.size()) < kListedBadLines) listed.push_back(e.what());
    }
  }
  DI_INPUT_CHECK(scan.requests > 0, "{}: no requests", options.input.string());
  keys.seal();
  scan.duplicates = keys.duplicates();
  if (!scan.duplicates.empty()) {  // named by a second reading: only now are they known
    RequestLines again(options.input);
    std::unordered_set<uint64_t> seen;
    const std::unordered_set<uint64_t> duplicated(scan.duplicates.begin(), scan.duplicates.end());
    while (again.next(line)) {
      const uint64_t key = line_key(line.text, line.ordinal);
      if (!duplicated.contains(key) || seen.insert(key).second) continue;
      ++scan.bad;
      if (static_cast<int64_t>(listed.size()) < kListedBadLines)
        listed.push_back(fmt::format("{}: its id is an earlier line's too (ids must be unique: a resumed job finds "
                                     "its requests by them)", again.where(line)));
    }
  }
  if (scan.bad > 0 && !options.record_bad_requests) {
    if (scan.bad == 1) throw InputError(listed.front());
    std::string text = fmt::format("{} of {} request lines are bad (fix them, or pass --bad-requests record to write "
                                   "an error record for each and run the rest):", scan.bad, scan.requests);
    for (const std::string& message : listed) text += "\n  " + message;
    if (scan.bad > kListedBadLines) text += fmt::format("\n  ... and {} more", scan.bad - kListedBadLines);
    throw InputError(text);
  }
  if (scan.bad > 0) spdlog::warn("{} of {} request lines are bad: each gets an error record (--bad-requests record)",
                                 scan.bad, scan.requests);
  return scan;
}

int run_durable_job(const DurableJobOptions& options, const InputScan* scan, const LineParser& parse,
                    Communicator& world, const text::BpeTokenizer* tokenizer, const WindowRunner& run_window) {
  const bool root = world.rank() == 0;
  std::optional<RequestLines> input;
  std::optional<ResultLog> log;
  std::optional<JobProgress> progress;
  std::unordered_set<uint64_t> seen_duplicates;  // world rank 0: the duplicated keys met so far
  const std::unordered_set<uint64_t> duplicated =
      root ? std::unordered_set<uint64_t>(scan->duplicates.begin(), scan->duplicates.end())
           : std::unordered_set<uint64_t>();
  if (root) {
    input.emplace(options.input);
    log.emplace(options.output, options.resume, options.sync_interval_s);
    progress.emplace(scan->requests, scan->already_done, scan->already_failed, options.progress_interval_s,
                     options.status_file, options.output.string());
    if (scan->already_done > 0)
      spdlog::info("--resume: {} of {} requests are done; running the other {}", scan->already_done, scan->requests,
                   scan->requests - scan->already_done);
  }
  const auto record_error = [&](const nlohmann::json& record) {
    log->append(record);
    progress->failed();
  };

  // World rank 0's drain: a stop signal stops the reading, drops what has not started, and gives what is in flight
  // drain_timeout_s to finish; past it, the output is synced and the job ends (kExitRequeue) without them.
  std::optional<std::chrono::steady_clock::time_point> drain_start;
  const auto stop_asked = [&] {
    if (!drain_start && stop_requested() != 0) {
      drain_start = std::chrono::steady_clock::now();
      spdlog::warn("signal {}: draining — no more requests start; those in flight get {:.0f} s, then the job exits "
                   "{} to be requeued and resumed", stop_requested(), options.drain_timeout_s, kExitRequeue);
    }
    if (drain_start && std::chrono::duration<double>(std::chrono::steady_clock::now() - *drain_start).count() >
                           options.drain_timeout_s) {
      spdlog::warn("the drain took longer than {:.0f} s: the requests still in flight are dropped (a resume runs "
                   "them)", options.drain_timeout_s);
      log->sync();
      progress->end("stopped");
      abort_job(kExitRequeue);
    }
    return drain_start.has_value();
  };
  const auto on_tick = [&] {
    log->sync_if_due();
    progress->tick();
    return stop_asked();
  };

  for (;;) {
    Window window;
    std::array<int64_t, 3> header = {kMore, 0, 0};  // status, lines, bytes of text
    std::string text;
    if (root) {
      RequestLines::Line line;
      bool more = true;
      while (static_cast<int64_t>(window.requests.size()) < options.window && !stop_asked() &&
             (more = input->next(line))) {
        const uint64_t key = line_key(line.text, line.ordinal);
        if (scan->done.contains(key)) continue;
        if (duplicated.contains(key) && !seen_duplicates.insert(key).second) {
          record_error(bad_line_record(line.text, line.ordinal, fmt::format("{}: its id is an earlier line's too",
                                                                             input->where(line))));
          continue;
        }
        OutputReading reading;
        BatchLineFormat format;
        try {
          Request request = parse(line.text, input->where(line), line.ordinal, reading, format);
          request.index = static_cast<int64_t>(window.requests.size());
          window.requests.push_back(std::move(request));
        } catch (const InputError& e) {  // (record mode; or a request the engine's final sizes refuse)
          record_error(bad_line_record(line.text, line.ordinal, e.what()));
          continue;
        }
        window.readings.push_back(reading);
        window.formats.push_back(format);
        window.ordinals.push_back(line.ordinal);
        text += line.text;
        text += '\n';
      }
      header = {drain_start ? kStopped : more ? kMore : kInputDone, static_cast<int64_t>(window.requests.size()),
                static_cast<int64_t>(text.size())};
    }
    world.broadcast(header.data(), 3, DType::kI64, 0, "the next window of requests");
    if (header[0] == kStopped) {  // a stop signal: what was read is not started (a resume runs it)
      if (root) {
        log->sync();
        progress->end("stopped");
      }
      return kExitRequeue;
    }
    DI_CHECK(header[2] < std::numeric_limits<int>::max(), "a window of {} bytes of requests: lower --window",
             header[2]);
    window.ordinals.resize(header[1]);
    text.resize(header[2]);
    world.broadcast(window.ordinals.data(), header[1], DType::kI64, 0, "the window's request ordinals");
    world.broadcast(text.data(), header[2], DType::kU8, 0, "the window's request lines");
    if (!root) {  // the same lines read as rank 0 read them (their ordinals give ids and seeds left out)
      size_t at = 0;
      for (int64_t k = 0; k < header[1]; ++k) {
        const size_t end = text.find('\n', at);
        OutputReading reading;
        BatchLineFormat format;
        Request request = parse(text.substr(at, end - at), fmt::format("{} (request {})", options.input.string(),
                                                                        window.ordinals[k] + 1),
                                window.ordinals[k], reading, format);
        request.index = k;
        window.requests.push_back(std::move(request));
        window.readings.push_back(reading);
        at = end + 1;
      }
    }
    if (!window.requests.empty()) {
      const auto on_result = [&](const RequestResult& result) {
        const BatchLineFormat& format = window.formats[result.index];
        const int64_t ordinal = window.ordinals[result.index];
        if (result.failure) {  // it failed after its start (its constraint dead-ended): alone
          record_error(error_line(format, result.id, ordinal, result.failure->code, result.failure->message));
          return;
        }
        nlohmann::json line;
        try {
          line = result_line(result, tokenizer, window.readings[result.index]);
          if (format.endpoint != BatchEndpoint::kNone)
            line = openai_result_line(line, format, ordinal, options.model_name, tokenizer != nullptr,
                                      static_cast<int64_t>(std::time(nullptr)));
        } catch (const std::exception& e) {  // an output the tokenizer cannot read: that request alone fails
          record_error(error_line(format, result.id, ordinal, "output_unreadable",
                                  fmt::format("request id {}: its output cannot be written: {}", result.id.dump(),
                                              e.what())));
          return;
        }
        log->append(line);
        progress->finished(result.prompt_tokens, static_cast<int64_t>(result.output_token_ids.size()));
      };
      run_window(window.requests, window.readings, on_result, on_tick);
    }
    if (header[0] == kInputDone) {
      if (root) {
        log->sync();
        progress->end("complete");
      }
      return 0;
    }
  }
}

}  // namespace deepinfer::app
