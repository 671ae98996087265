// The host's median milliseconds of `repeats` runs of `f` after 3 warm-up runs: for work whose cost is on the host, or
// calls that return only when the device is done (microbench.h's median_ms times the device with CUDA events).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

template <class F>
double host_median_ms(int repeats, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
