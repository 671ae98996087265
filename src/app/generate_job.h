// generate as a batch job that survives its end: the input read once by world rank 0 and handed to every rank in
// windows, results appended to the output as they finish (result_log.h), --resume to continue a killed job, a
// drain on SIGTERM / SIGUSR1 that exits kExitRequeue for the batch script to requeue, and progress (job_progress.h).
//
//  1. scan_input (world rank 0, before any work): every line read, parsed and validated once; bad lines are listed
//     (up to a bound) and refuse the job, or (--bad-requests record) become error records; ids must be unique (a
//     resumed job finds its requests by them); with --resume, the requests the output already holds are counted.
//     Only 64-bit key hashes are kept: 8 bytes a request.
//  2. run_durable_job (every rank): world rank 0 reads the next window of lines (skipping those done), broadcasts
//     their text, and every rank parses the window and runs it (`run_window`: generate_spmd); rank 0 writes each
//     result the moment it reaches it. Memory holds one window on every rank, never the input.
// A window ends when all its requests have finished, so a job's running set empties a little at each window's
// end; windows of several times the deployment's running capacity keep that small.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "src/app/jsonl.h"
#include "src/app/openai_batch.h"
#include "src/app/result_log.h"
#include "src/comm/communicator.h"
#include "src/engine/request.h"

namespace deepinfer::app {

struct DurableJobOptions {
  std::filesystem::path input;
  std::filesystem::path output;       // regular file, or a device / pipe (no resume)
  std::filesystem::path status_file;  // empty: none
  bool resume = false;
  bool record_bad_requests = false;  // --bad-requests record (default: refuse the job)
  double sync_interval_s = 5.0;
  double progress_interval_s = 30.0;
  double drain_timeout_s = 60.0;  // after a stop signal: the longest the requests in flight may take
  int64_t window = 4096;          // requests a window
  std::string model_name;         // the response's "model" where a request names none
};

// A line as a request, checked against the model and the engine (InputError naming `where` when it is bad).
using LineParser = std::function<Request(const std::string& text, const std::string& where, int64_t ordinal,
                                         OutputReading& reading, BatchLineFormat& format)>;

// What world rank 0 learned of the input before the work.
struct InputScan {
  int64_t requests = 0;           // non-blank lines
  int64_t bad = 0;                // lines that are not a valid request (record mode: each gets an error record)
  int64_t already_done = 0;       // lines whose result the output holds (--resume)
  int64_t already_failed = 0;     // of the output's lines, error records (--resume)
  bool constrained = false;       // some request has an output constraint
  KeySet done;                    // the output's keys (--resume)
  std::vector<uint64_t> duplicates;  // keys given to more than one line: the later ones are bad
};

// Pass 1 (world rank 0). InputError listing the bad lines (the first 20, and how many) unless record mode.
InputScan scan_input(const DurableJobOptions& options, const LineParser& parse);

// Runs one window's requests (indexed 0..n-1 in it) across the deployment; `on_result` (world rank 0) gets each
// result as it arrives, `on_tick` (world rank 0) is polled every turn and returns true to drain.
using WindowRunner = std::function<std::vector<RequestResult>(
    const std::vector<Request>& requests, const std::vector<OutputReading>& readings,
    const std::function<void(const RequestResult&)>& on_result, const std::function<bool()>& on_tick)>;

// Pass 2 (every rank, collective over `world`). `scan` and `tokenizer` are world rank 0's (the tokenizer, when
// loaded, gives results their text). Returns 0 when every request has its line, kExitRequeue on every rank when
// a stop signal drained the job.
int run_durable_job(const DurableJobOptions& options, const InputScan* scan, const LineParser& parse,
                    Communicator& world, const text::BpeTokenizer* tokenizer, const WindowRunner& run_window);

}  // namespace deepinfer::app
