// How the ranks agree on the outcome of a phase (a command's local preparation, or its failure), with a
// deadline, so that a rank that is stopped, stuck or dead never leaves the others waiting forever.
//
// Every rank reports (code, message) to rank 0 and waits for rank 0's verdict: the highest code and the message
// of the lowest failing rank. Point to point with tags of its own, so a vote never matches another message and
// needs no collective. Rank 0 knows who has reported, so when the deadline passes it names the ranks it waited
// for; a rank that waits for rank 0's verdict names rank 0.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>

namespace deepinfer {

struct Outcome {
  int code = 0;                // 0: every rank succeeded
  int first_failed_rank = -1;  // the lowest rank with a non-zero code
  std::string message;         // that rank's message
};

class OutcomeVote {
 public:
  explicit OutcomeVote(MPI_Comm world);  // not collective; does not own `world`
  OutcomeVote(const OutcomeVote&) = delete;
  OutcomeVote& operator=(const OutcomeVote&) = delete;

  // The agreed outcome, the same on every rank; nullopt when not every rank took part within `timeout_s`,
  // after this rank has logged who it waited for (`phase` says for what). A rank that gets nullopt cannot know
  // where the others are and should abort the job.
  // `log_timeout` false: the caller reports a missed deadline itself.
  std::optional<Outcome> agree(int code, const std::string& message, double timeout_s, const std::string& phase,
                               bool log_timeout = true);

  int rank() const { return rank_; }

 private:
  std::optional<Outcome> collect_on_root(int code, const std::string& message, double timeout_s,
                                         const std::string& phase, bool log_timeout);
  std::optional<Outcome> report_to_root(int code, const std::string& message, double timeout_s,
                                        const std::string& phase, bool log_timeout);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace deepinfer
