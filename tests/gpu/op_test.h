// The harness of the GPU op table (tests/gpu/test_cuda_ops.cpp): every CUDA op against its CPU form, one row per
// op x sizes x output dtype, each with the tolerance its outputs are held to (as ggml's test-backend-ops). The CPU
// forms live in kernels/cpu under the CUDA launchers' names. A row draws fresh random inputs (never zeros), rounds
// them to bf16 before the CPU form sees them, so a tolerance covers only the op's own rounding and summation order,
// and poisons every output first, so unwritten elements show as NaN. Tolerances are relative L2 errors: bf16
// outputs 1e-2, fp32 outputs 2e-3, indices and copies exact; rows whose op fuses others are held to the unfused
// ops' bits. The rows are grouped by what they test, one file each (test_ops_*.cpp), each adding its rows.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/core/device.h"
#include "src/core/device_array.h"
#include "src/core/tensor.h"

namespace deepinfer::op_test {

inline constexpr double kBf16 = 1e-2;
inline constexpr double kF32 = 2e-3;
inline constexpr double kExact = 0.0;

using Bf16 = uint16_t;  // host view of __nv_bfloat16
using Sizes = std::vector<std::pair<std::string, int64_t>>;

inline __nv_bfloat16* bf(DeviceArray<Bf16>& a) { return reinterpret_cast<__nv_bfloat16*>(a.data()); }
inline const __nv_bfloat16* bf(const DeviceArray<Bf16>& a) {
  return reinterpret_cast<const __nv_bfloat16*>(a.data());
}

inline std::vector<float> to_float(const std::vector<Bf16>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}
// A Linear's output of `count` values, bf16 or fp32 (a row's f32_out), poisoned: the pointer the kernel writes and
// the values it wrote, as floats.
struct LinearOutput {
  LinearOutput(bool f32_out, int64_t count) : f32(f32_out), y16(count), y32(count) {
    y16.poison();
    y32.poison();
  }
  void* data() { return f32 ? static_cast<void*>(y32.data()) : static_cast<void*>(y16.data()); }
  std::vector<float> host() const { return f32 ? y32.to_host() : to_float(y16.to_host()); }
  const bool f32;
  DeviceArray<Bf16> y16;
  DeviceArray<float> y32;
};
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;  // unwritten (poisoned) or overflowed
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0.0 ? (diff == 0.0 ? 0.0 : INFINITY) : std::sqrt(diff / norm);
}
inline void sync() {
  DI_CUDA_CHECK(cudaGetLastError());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
}
inline int num_sms() {
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// What one row's run sees: its sizes, a generator, a cuBLAS handle, and the checks it reports.
class OpRun {
 public:
  OpRun(const Sizes& sizes, double tolerance) : sizes_(sizes), tolerance_(tolerance) {}
  ~OpRun() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;
  int64_t operator[](const std::string& name) const {
    for (const auto& [n, v] : sizes_)
      if (n == name) return v;
    ADD_FAILURE() << "the row has no size '" << name << "'";
    return 0;
  }
  std::mt19937& rng() { return rng_; }
  // Random bf16 values (as bf16 bits) and their exact fp32 values.
  std::vector<Bf16> random_bf16(size_t n, std::vector<float>& exact, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<Bf16> bits(n);
    exact.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16(normal(rng_));
      exact[i] = bf16_to_float(bits[i]);
    }
    return bits;
  }
  cublasHandle_t blas() {
    if (handle_ == nullptr) {
      EXPECT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasSetStream(handle_, cudaStreamPerThread), CUBLAS_STATUS_SUCCESS);
    }
    return handle_;
  }
  // got against the CPU form's want, at the row's tolerance.
  void close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    const double e = rel_error(got, want);
    if (tolerance_ == kExact) EXPECT_EQ(e, 0.0) << what << seed_note();
    else EXPECT_LT(e, tolerance_) << what << ": relative error " << e << ", tolerance " << tolerance_ << seed_note();
  }
  // Bit for bit, whatever the row's tolerance (indices, copies, fused ops against their parts, reruns).
  template <class T>
  void exact(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0)
        << what << ": not the same bits" << seed_note();
  }

 private:
  // Every run draws new data; DEEPINFER_OP_SEED=N replays the data of a failure's seed.
  static uint32_t choose_seed() {
    const char* fixed = std::getenv("DEEPINFER_OP_SEED");
    return fixed != nullptr ? static_cast<uint32_t>(std::strtoul(fixed, nullptr, 10)) : std::random_device{}();
  }
  std::string seed_note() const { return " (data seed " + std::to_string(seed_) + ": DEEPINFER_OP_SEED reruns it)"; }

  const Sizes& sizes_;
  double tolerance_;
  uint32_t seed_ = choose_seed();
  std::mt19937 rng_{seed_};
  cublasHandle_t handle_ = nullptr;
};

// The SwiGLU clamp of a row (V4.1's swiglu_limit; 0: none), from its size "limit_milli" in thousandths.
inline float swiglu_limit(OpRun& r) { return static_cast<float>(r["limit_milli"]) / 1000.0f; }

struct OpCase {
  std::string op;     // the CUDA launcher (kernels/cuda) and its CPU form's name
  std::string dtype;  // of the compared output
  Sizes sizes;
  double tolerance;
  std::function<void(OpRun&)> run;
};

// Appends rows to the table.
class OpTable {
 public:
  void add(std::string op, std::string dtype, Sizes sizes, double tolerance, std::function<void(OpRun&)> run) {
    cases_.push_back({std::move(op), std::move(dtype), std::move(sizes), tolerance, std::move(run)});
  }
  const std::vector<OpCase>& cases() const { return cases_; }

 private:
  std::vector<OpCase> cases_;
};

// Each file's rows (test_ops_dense.cpp, test_ops_moe.cpp, test_ops_attention.cpp, test_ops_v41.cpp).
void add_dense_rows(OpTable& t);
void add_fp8_rows(OpTable& t);
void add_moe_rows(OpTable& t);
void add_attention_rows(OpTable& t);
void add_v41_rows(OpTable& t);
void add_v41_hc_rows(OpTable& t);  // test_ops_v41_hc.cpp

}  // namespace deepinfer::op_test
