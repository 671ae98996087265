// How long the device sat idle between two steps (the host's post-processing and preparation showing through):
// an event where a step's work starts, and one where each step's work ends (three, in turn, so the previous
// step's stays readable), compared once the step's results are back. Shared by the CUDA models; a drafter's call
// (DSpark's blocks, V3's MTP module) counts as a step of its own.
#pragma once

#include <cuda_runtime_api.h>

#include "src/model/device_steps.h"
#include "src/model/cuda/device_memory.h"

namespace deepinfer {

class DeviceIdleMeter {
 public:
  // On the per-thread default stream, before the step's first device work: starts a step.
  void record_start() { DI_CUDA_CHECK(cudaEventRecord(start_[started_++ % kSlots].get(), cudaStreamPerThread)); }
  // The event that marks the last started step's end (recorded after its last kernel).
  cudaEvent_t end_event() const { return end_[(started_ + kSlots - 1) % kSlots].get(); }
  void record_end() { DI_CUDA_CHECK(cudaEventRecord(end_event(), cudaStreamPerThread)); }
  // Once the oldest step not yet measured has its results back (steps are measured in the order they started, each
  // once, its end event recorded): the idle time before it, when there was a step before.
  void measure() {
    const int64_t step = measured_++;
    // Its end event is behind the result copy, which has waited for it, except where a step had no rows: a copy
    // of 0 bytes returns at once, so wait for the step's end itself.
    DI_CUDA_CHECK(cudaEventSynchronize(end_[step % kSlots].get()));
    if (step > 0) {
      float ms = 0.0f;
      DI_CUDA_CHECK(cudaEventElapsedTime(&ms, end_[(step - 1) % kSlots].get(), start_[step % kSlots].get()));
      ++totals_.gaps;
      totals_.ms += ms;
    }
  }
  // The gaps measured so far (none until two steps have run) and their sum.
  DeviceIdle totals() const { return totals_; }

 private:
  // Overlapped scheduling starts step N + 1 before measuring N, whose idle time reads N - 1's end: three slots.
  static constexpr int64_t kSlots = 3;
  CudaEvent start_[kSlots];
  CudaEvent end_[kSlots];
  int64_t started_ = 0, measured_ = 0;
  DeviceIdle totals_;
};

}  // namespace deepinfer
