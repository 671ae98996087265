// How every subcommand runs on every rank, so that bad input never hangs a job:
//  1. prepare(): local work only (parse configs, validate, open inputs) — no collectives. Every rank then
//     agrees on the outcome; if any rank failed, rank 0 prints the first failing rank's message once and
//     every rank returns the same non-zero code.
//  2. execute(): the collective work. A failure here may leave peers waiting inside a collective, so the
//     failing rank waits a few seconds for the others to fail alike (then rank 0 prints the first failure
//     once and every rank returns its code); otherwise it prints its own error and aborts the job.
#pragma once

#include "src/comm/world.h"

#include <functional>

namespace deepinfer::app {

int run_spmd_command(const World& world, const std::function<void()>& prepare,
                     const std::function<void()>& execute);

}  // namespace deepinfer::app
