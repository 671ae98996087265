// The signals that ask a job to stop: SIGTERM (a scheduler's preemption or time limit) and SIGUSR1 (Slurm's
// `--signal`, forwarded by the batch script). A handler only records which arrived; a command that can stop
// cleanly (generate: drain, sync its output, exit kExitRequeue) asks stop_requested() between steps.
#pragma once

namespace deepinfer {

// The exit code of a job that stopped on such a signal with its output synced, for a batch script to requeue it
// (EX_TEMPFAIL of sysexits.h: try again later).
inline constexpr int kExitRequeue = 75;

// Installs the handlers (SIGTERM, SIGUSR1) and ignores SIGPIPE: a reader of --stream or of the standard output
// that goes away gives a failed write (EPIPE) that the writer handles, not the end of the process.
void install_stop_signals();

// The signal that asked the process to stop (0: none yet).
int stop_requested();

}  // namespace deepinfer
