#include "src/comm/outcome_vote.h"

#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <thread>
#include <vector>

#include "src/core/check.h"

namespace deepinfer {

namespace {

// Tags of their own on the world communicator (the Mailbox's are 101-301; MPI guarantees tags up to 32767).
// Point to point only, so a vote needs no collective, not even a communicator duplicate at start-up that a
// stopped rank could block.
constexpr int kTagReport = 32001;      // int [code, message length]
constexpr int kTagReportText = 32002;  // the message
constexpr int kTagVerdict = 32003;     // int [code, first failed rank, message length]
constexpr int kTagVerdictText = 32004; // the message

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Polls `requests` until all are done or `deadline` passes; true when all are done. `on_done(i)` runs once for
// each request as it completes (it may post another request into the vector's free tail).
template <typename OnDone>
bool wait_all_until(std::vector<MPI_Request>& requests, Clock::time_point deadline, OnDone on_done) {
  std::vector<bool> done(requests.size(), false);
  for (int spin = 0;; ++spin) {
    bool all = true;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      DI_MPI_CHECK(MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE));
      if (flag) {
        done[i] = true;
        on_done(i);
        if (done.size() < requests.size()) done.resize(requests.size(), false);
      } else {
        all = false;
      }
    }
    if (all && done.size() == requests.size()) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 1000 ? 50 : 1000));
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  if (ranks.size() > shown) text += fmt::format(" and {} more", ranks.size() - shown);
  return text;
}

}  // namespace

OutcomeVote::OutcomeVote(MPI_Comm world) : comm_(world) {
  DI_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DI_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

std::optional<Outcome> OutcomeVote::agree(int code, const std::string& message, double timeout_s,
                                          const std::string& phase, bool log_timeout) {
  if (size_ == 1) return Outcome{code, code != 0 ? 0 : -1, code != 0 ? message : std::string()};
  return rank_ == 0 ? collect_on_root(code, message, timeout_s, phase, log_timeout)
                    : report_to_root(code, message, timeout_s, phase, log_timeout);
}

std::optional<Outcome> OutcomeVote::collect_on_root(int code, const std::string& message, double timeout_s,
                                                    const std::string& phase, bool log_timeout) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::vector<std::array<int, 2>> headers(size_);
  std::vector<std::string> texts(size_);
  std::vector<MPI_Request> requests;
  std::vector<int> request_rank;  // the peer of each request
  std::vector<bool> reported(size_, false);
  reported[0] = true;
  for (int r = 1; r < size_; ++r) {
    requests.emplace_back();
    request_rank.push_back(r);
    DI_MPI_CHECK(MPI_Irecv(headers[r].data(), 2, MPI_INT, r, kTagReport, comm_, &requests.back()));
  }
  const size_t num_headers = requests.size();
  // Room for every text request, so that the vector never reallocates under a pending MPI_Request.
  requests.reserve(2 * num_headers);
  const bool all_in = wait_all_until(requests, deadline, [&](size_t i) {
    const int r = request_rank[i];
    if (i >= num_headers || headers[r][1] == 0) {
      reported[r] = true;
      return;
    }
    texts[r].resize(headers[r][1]);
    requests.emplace_back();
    request_rank.push_back(r);
    DI_MPI_CHECK(MPI_Irecv(texts[r].data(), headers[r][1], MPI_CHAR, r, kTagReportText, comm_, &requests.back()));
  });
  if (!all_in) {
    if (!log_timeout) return std::nullopt;
    std::vector<int> missing;
    for (int r = 1; r < size_; ++r)
      if (!reported[r]) missing.push_back(r);
    spdlog::error("rank 0 waited {:.0f} s for rank{} {} to finish {}: stopped, stuck or dead "
                  "(DEEPINFER_COMM_TIMEOUT_S = {:.0f} s); aborting the job", seconds_since(start),
                  missing.size() == 1 ? "" : "s", rank_list(missing), phase, timeout_s);
    return std::nullopt;
  }
  Outcome outcome;
  headers[0] = {code, static_cast<int>(message.size())};
  texts[0] = message;
  for (int r = 0; r < size_; ++r) {
    outcome.code = std::max(outcome.code, headers[r][0]);
    if (headers[r][0] != 0 && outcome.first_failed_rank < 0) {
      outcome.first_failed_rank = r;
      outcome.message = texts[r];
    }
  }
  const std::array<int, 3> verdict = {outcome.code, outcome.first_failed_rank,
                                      static_cast<int>(outcome.message.size())};
  std::vector<MPI_Request> sends;
  sends.reserve(2 * size_);
  for (int r = 1; r < size_; ++r) {
    sends.emplace_back();
    DI_MPI_CHECK(MPI_Isend(verdict.data(), 3, MPI_INT, r, kTagVerdict, comm_, &sends.back()));
    if (verdict[2] == 0) continue;
    sends.emplace_back();
    DI_MPI_CHECK(MPI_Isend(outcome.message.data(), verdict[2], MPI_CHAR, r, kTagVerdictText, comm_, &sends.back()));
  }
  // Every peer has reported and is waiting for these, so they complete; the deadline guards a peer that dies now.
  const auto send_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  if (!wait_all_until(sends, send_deadline, [](size_t) {})) {
    if (log_timeout)
      spdlog::error("rank 0 waited {:.0f} s to hand its verdict on {} to every rank; aborting the job", timeout_s,
                    phase);
    return std::nullopt;
  }
  return outcome;
}

std::optional<Outcome> OutcomeVote::report_to_root(int code, const std::string& message, double timeout_s,
                                                   const std::string& phase, bool log_timeout) {
  const auto start = Clock::now();
  // Rank 0 knows who is missing, so the others wait longer than it does and its report is the one printed; when
  // rank 0 itself is missing, rank 1 reports it, and the rest wait longer still so that its abort ends them
  // before they speak.
  const double margin_s = std::min(5.0, timeout_s);
  const double patience_s = timeout_s + (rank_ == 1 ? margin_s : 2 * margin_s);
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(patience_s));
  const std::array<int, 2> header = {code, static_cast<int>(message.size())};
  std::array<int, 3> verdict = {0, -1, 0};
  Outcome outcome;
  std::vector<MPI_Request> requests;
  requests.reserve(4);
  requests.emplace_back();
  DI_MPI_CHECK(MPI_Isend(header.data(), 2, MPI_INT, 0, kTagReport, comm_, &requests.back()));
  if (header[1] > 0) {
    requests.emplace_back();
    DI_MPI_CHECK(MPI_Isend(message.data(), header[1], MPI_CHAR, 0, kTagReportText, comm_, &requests.back()));
  }
  const size_t verdict_idx = requests.size();
  requests.emplace_back();
  DI_MPI_CHECK(MPI_Irecv(verdict.data(), 3, MPI_INT, 0, kTagVerdict, comm_, &requests.back()));
  const bool done = wait_all_until(requests, deadline, [&](size_t i) {
    if (i != verdict_idx || verdict[2] == 0) return;
    outcome.message.resize(verdict[2]);
    requests.emplace_back();
    DI_MPI_CHECK(
        MPI_Irecv(outcome.message.data(), verdict[2], MPI_CHAR, 0, kTagVerdictText, comm_, &requests.back()));
  });
  if (!done) {
    if (!log_timeout) return std::nullopt;
    spdlog::error("rank {} waited {:.0f} s for rank 0's verdict on {}: rank 0, or a rank it waits for, is stopped, "
                  "stuck or dead (DEEPINFER_COMM_TIMEOUT_S = {:.0f} s); aborting the job", rank_,
                  seconds_since(start), phase, timeout_s);
    return std::nullopt;
  }
  outcome.code = verdict[0];
  outcome.first_failed_rank = verdict[1];
  return outcome;
}

}  // namespace deepinfer
