#include "src/app/spmd_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "src/core/check.h"
#include "src/comm/communicator.h"
#include "src/comm/mpi_util.h"
#include "src/comm/outcome_vote.h"

namespace deepinfer::app {

namespace {

// How long ranks that failed after start-up wait for each other, so that a failure every rank shares (the
// usual case) is printed once by rank 0 rather than once per rank. A rank whose peers do not all fail within
// it speaks for itself and ends the job.
constexpr double kFailureGraceS = 3.0;

// Runs `step`, turning an exception into (exit code, message).
std::pair<int, std::string> capture(const std::function<void()>& step) {
  try {
    step();
    return {0, {}};
  } catch (const InputError& e) {
    return {kExitInputError, e.what()};
  } catch (const std::bad_alloc&) {
    return {kExitRuntimeError, "out of host memory (std::bad_alloc)"};
  } catch (const std::exception& e) {
    return {kExitRuntimeError, e.what()};
  }
}

// Fault injection for the tests: DEEPINFER_FAULT_STOP_RANK_IN_PREPARE=R stops world rank R (SIGSTOP) as its
// preparation begins, as a rank frozen while loading the model would be.
void maybe_stop_for_test(int rank) {
  const char* victim = std::getenv("DEEPINFER_FAULT_STOP_RANK_IN_PREPARE");
  if (victim == nullptr || std::string(victim) != std::to_string(rank)) return;
  spdlog::warn("fault injection: world rank {} stops itself in its preparation (DEEPINFER_FAULT_STOP_RANK_IN_PREPARE)",
               rank);
  spdlog::default_logger()->flush();
  std::raise(SIGSTOP);
}

// DEEPINFER_FAULT_FAIL_IN_EXECUTE=all|R makes every rank, or world rank R, fail as its collective work begins,
// the way a failure after start-up does (the same bad state everywhere, or one rank's own trouble).
void maybe_fail_for_test(int rank) {
  const char* who = std::getenv("DEEPINFER_FAULT_FAIL_IN_EXECUTE");
  if (who == nullptr || (std::string(who) != "all" && std::string(who) != std::to_string(rank))) return;
  throw Error(fmt::format("fault injection: the work after start-up failed (DEEPINFER_FAULT_FAIL_IN_EXECUTE={})",
                          who));
}

void print_error(int first_failed, const std::string& message) {
  const std::string origin = first_failed <= 0 ? "" : fmt::format(" (on rank {})", first_failed);
  fmt::print(stderr, "deepinfer: error{}: {}\n", origin, message);
  std::fflush(stderr);
}

}  // namespace

int run_spmd_command(const World& world, const std::function<void()>& prepare,
                     const std::function<void()>& execute) {
  OutcomeVote vote(world.comm());
  const int rank = vote.rank();
  // The vote's own deadline: an unreadable DEEPINFER_COMM_TIMEOUT_S is bad input like any other, reported
  // through a vote under the default.
  double timeout_s = kDefaultCommTimeoutS;
  auto [code, message] = capture([&] {
    timeout_s = default_comm_timeout_s();
    maybe_stop_for_test(rank);
    prepare();
  });
  std::optional<Outcome> agreed =
      vote.agree(code, message, timeout_s, "its preparation (reading the inputs, loading the model)");
  if (!agreed) abort_job(kExitRuntimeError);
  if (agreed->code != 0) {
    if (rank == 0) print_error(agreed->first_failed_rank, agreed->message);
    return agreed->code;
  }

  std::tie(code, message) = capture([&] {
    maybe_fail_for_test(rank);
    execute();
  });
  if (code == 0) return 0;
  // Peers may be waiting for this rank inside a collective: unless every rank failed too (then rank 0 prints
  // the first failure once and every rank returns its code), this rank reports itself and ends the job.
  agreed = vote.agree(code, message, kFailureGraceS, "", /*log_timeout=*/false);
  if (agreed && agreed->code != 0) {
    if (rank == 0) print_error(agreed->first_failed_rank, agreed->message);
    return agreed->code;
  }
  fmt::print(stderr, "deepinfer: error on rank {}: {}\n", rank, message);
  abort_job(code);
}

}  // namespace deepinfer::app
