#include "src/core/stop_signal.h"

#include <csignal>

namespace deepinfer {

namespace {

// The one mutable global of the program, as a signal handler can only write such an object
// (a volatile std::sig_atomic_t, per the C++ standard's rules for signal handlers).
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signal) { g_stop_signal = signal; }

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in progress go on: the loop polls the flag
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

int stop_requested() { return g_stop_signal; }

}  // namespace deepinfer
