// What the kernel microbenchmarks share: the median of repeated runs after warm-up, timed with CUDA events on the
// calling thread's stream (where the benchmarks launch), and a main() that reports a failed CUDA call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
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

// n bf16 values on the device, as floats on the host.
inline std::vector<float> to_host_float(const __nv_bfloat16* data, size_t n) {
  std::vector<__nv_bfloat16> bits(n);
  DI_CUDA_CHECK(cudaMemcpy(bits.data(), data, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(bits[i]);
  return out;
}

// The largest |got - ref| relative to the largest |ref| (two kernels' outputs compared).
inline double max_relative_difference(const std::vector<float>& got, const std::vector<float>& ref) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

// main()'s body: run(argc, argv), or one line on stderr naming the benchmark and the failure (a failed CUDA call,
// DI_CUDA_CHECK, names itself) and exit status 1.
inline int microbench_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}
