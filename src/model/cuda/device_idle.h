// How long the device sat idle between two steps (the host's post-processing and preparation showing through):
// an event where a step's work starts, and one where each step's work ends (two, alternating, so the previous
// step's stays readable), compared once the step's results are back. Shared by the CUDA models.
#pragma once

#include <cuda_runtime_api.h>

#include "src/model/cuda/device_memory.h"

namespace deepinfer {

class DeviceIdleMeter {
 public:
  // On the per-thread default stream, before the step's first device work.
  void record_start() { DI_CUDA_CHECK(cudaEventRecord(start_.get(), cudaStreamPerThread)); }
  // The event that marks this step's end (sample_on_device records it after the step's last kernel).
  cudaEvent_t end_event() const { return end_[slot_].get(); }
  void record_end() { DI_CUDA_CHECK(cudaEventRecord(end_event(), cudaStreamPerThread)); }
  // Once the step's results are back (its end event recorded): the idle time before it, when there was a step
  // before.
  void measure() {
    // Both events are behind the step's result copy, which has waited for them, except where a step had no rows:
    // a copy of 0 bytes returns at once, so wait for the step's end itself.
    DI_CUDA_CHECK(cudaEventSynchronize(end_event()));
    if (have_previous_end_) {
      float ms = 0.0f;
      DI_CUDA_CHECK(cudaEventElapsedTime(&ms, end_[1 - slot_].get(), start_.get()));
      idle_ms_ = ms;
    }
    have_previous_end_ = true;
    slot_ = 1 - slot_;
  }
  double last_ms() const { return idle_ms_; }  // negative until two steps have run

 private:
  CudaEvent start_;
  CudaEvent end_[2];
  int slot_ = 0;
  bool have_previous_end_ = false;
  double idle_ms_ = -1.0;
};

}  // namespace deepinfer
