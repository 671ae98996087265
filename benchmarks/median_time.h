// Timing for the kernel microbenchmarks: the median of repeated runs after warm-up, with CUDA events on the
// calling thread's stream (where the benchmarks launch).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "src/core/check.h"

// Median milliseconds of `reps` runs of `run` after 3 warm-up runs.
template <class F>
float median_ms(int reps, F run) {
  cudaEvent_t start, stop;
  DI_CUDA_CHECK(cudaEventCreate(&start));
  DI_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) run();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    DI_CUDA_CHECK(cudaEventRecord(start, cudaStreamPerThread));
    run();
    DI_CUDA_CHECK(cudaEventRecord(stop, cudaStreamPerThread));
    DI_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaEventDestroy(start));
  DI_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
