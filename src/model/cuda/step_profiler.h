// Optional per-step time breakdown of the CUDA forward (DEEPINFER_PROFILE=1): CUDA events between phases on
// the step's stream, summed per phase name, logged once per step. Off, it records nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

namespace deepinfer {

class StepProfiler {
 public:
  StepProfiler();
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  bool enabled() const { return enabled_; }
  // The time from the previous mark to now belongs to `phase`.
  void mark(const char* phase);
  // Waits for the step and logs "phase: ms" sorted by time; clears.
  void report(const std::string& title);

 private:
  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> phases_;
  size_t used_ = 0;
};

}  // namespace deepinfer
