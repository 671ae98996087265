#include "src/model/cuda/step_profiler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "src/core/check.h"

namespace deepinfer {

StepProfiler::StepProfiler() {
  const char* flag = std::getenv("DEEPINFER_PROFILE");
  enabled_ = flag != nullptr && std::string(flag) == "1";
}

StepProfiler::~StepProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StepProfiler::mark(const char* phase) {
  if (!enabled_) return;
  if (used_ == events_.size()) {
    cudaEvent_t e;
    DI_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  DI_CUDA_CHECK(cudaEventRecord(events_[used_++], nullptr));
  phases_.push_back(phase);
}

void StepProfiler::report(const std::string& title) {
  if (!enabled_ || used_ < 2) return;
  DI_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  std::map<std::string, double> total;
  double all = 0;
  for (size_t i = 1; i < used_; ++i) {
    float ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
    total[phases_[i]] += ms;
    all += ms;
  }
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [name, ms] : total) sorted.emplace_back(ms, name);
  std::sort(sorted.rbegin(), sorted.rend());
  std::string text;
  for (const auto& [ms, name] : sorted) text += fmt::format("{}{} {:.2f}", text.empty() ? "" : ", ", name, ms);
  spdlog::info("profile {}: {:.2f} ms between the first and last mark: {}", title, all, text);
  used_ = 0;
  phases_.clear();
}

}  // namespace deepinfer
