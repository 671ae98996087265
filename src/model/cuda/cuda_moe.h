// The MoE block of the CUDA models (DeepSeek V2/V3 and V4.1 share it): the router, the shared experts and the
// routed experts of one layer. A few tokens run the routed experts as matrix-vector kernels straight from the
// routing; decode batches as route, the device-offset grouped kernels (each expert's weights streamed once),
// unpermute; prefill as permute, cuBLAS GEMMs batched over 256-row chunks of each expert's rows, unpermute. With
// expert parallelism the rows go GPU to GPU through the dispatcher's device path (NCCL), or are staged through
// host memory (MPI transport); without it the shared experts run on a side stream meanwhile. SwiGLU is clamped
// at config.swiglu_limit where that is > 0 (V4.1).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "src/core/device_array.h"
#include "src/model/cuda/cuda_expert_store.h"
#include "src/model/cuda/cuda_mlp.h"
#include "src/model/cuda/device_memory.h"
#include "src/model/cuda/step_profiler.h"
#include "src/model/expert_dispatch.h"
#include "src/model/model_config.h"

namespace deepinfer {

// One MoE layer's weights besides its routed experts (which the expert store holds).
struct CudaMoeWeights {
  const __nv_bfloat16* router = nullptr;  // [E, hidden]
  const float* router_bias = nullptr;     // the selection bias (V3's e_score_correction_bias, V4.1's gate.bias)
  DeviceMlp shared;
  bool has_shared = false;
};

// What may come after the MoE: its output added to the residual stream, normalised with `weight` into `normed`.
struct ResidualNorm {
  __nv_bfloat16* residual;
  const __nv_bfloat16* weight;
  __nv_bfloat16* normed;
};

class CudaMoe {
 public:
  // Up to this many (token, expert) pairs the routed experts run as matrix-vector products (moe_gemv.cuh), which
  // measured faster there than the grouped kernels (results/h200/design-measurements.md).
  static constexpr int64_t kGemvMaxPairs = 64;
  // Below this many pairs the permuted rows run through the device-offset grouped kernels (moe_grouped.cuh): no
  // host round trip, so such steps are graphed too. From it (prefill) each expert's rows are padded to 256-row
  // chunks and every projection is one batched cuBLAS GEMM of uniform chunks.
  static constexpr int64_t kGroupedMaxPairs = 4096;
  static constexpr int64_t kExpertChunk = 256;
  // FP4 experts at prefill: below this many rows an expert on average the projections read the codes as stored
  // (moe_fp4_gemm, ~180 TFLOP/s at any count); from it kDequantExperts at a time are dequantised to bf16 for the
  // chunked GEMMs (a cost that hardly grows with the rows: at 384 x 256 rows 12.2 ms against 25.6 for the gate/up
  // projection, at 64 rows 12.2 against 6.6; benchmarks/moe_fp4_gemm_bench, results/h200/v41/).
  static constexpr int64_t kFp4TileMaxRowsPerExpert = 128;
  // Under expert parallelism, FP4 pairs (entries served elsewhere included) a place up to which the matrix-vector
  // kernels run where the grouped form does not (each pair streams its expert; a rank slice of EP 64 at batch 8 put 46
  // on each of 6 places and took 53 ms a 40-layer step that way).
  static constexpr int64_t kFp4GemvMaxPairsPerPlace = 2;
  // FP4 pairs a place, times 2, up to which decode steps take the grouped form (cuda_moe.cpp: fp4_tiles_from_pairs).
  static constexpr int64_t kFp4GroupedMaxPairsPerPlaceTimes2 = 5;
  // FP4 pairs a step from which (and a quarter a place at least), and pairs a place up to which, decode steps take the
  // tensor-core grouped form.
  static constexpr int64_t kFp4MmaMinPairs = 96;
  static constexpr int64_t kFp4MmaMaxPairsPerPlace = 8;
  static constexpr int64_t kDequantExperts = 16;
  // FP8 experts (DeepSeek-V3's) at decode: the per-pair matrix-vector kernels (each pair streams its expert's codes)
  // up to this many pairs a place, or kGemvMaxPairs; above, the permuted rows' chunked GEMMs on experts dequantised
  // kDequantExperts at a time, or V3's through the FP8 GEMM (a host round trip). The grouped FP8 matrix-vector form
  // measured slower (fp8_grouped_from_pairs in cuda_moe.cpp).
  static constexpr int64_t kFp8GemvMaxPairsPerPlace = 4;

  // `config`, `experts` and `profiler` are the model's and outlive this block.
  CudaMoe(const ModelConfig& config, CudaExpertStore& experts, int num_sms, StepProfiler& profiler);

  // out [rows, hidden] = MoE(h) of MoE layer `moe_layer`, on the model's stream (the per-thread default). With
  // `then`, where its last kernel can (returned), it adds the output into then->residual and normalises instead
  // of storing `out`.
  bool run(int64_t moe_layer, const CudaMoeWeights& w, const __nv_bfloat16* h, __nv_bfloat16* out, int64_t rows,
           ExpertDispatcher* dispatcher, ScratchPool& scratch, const ResidualNorm* then) const;
  // Whether the routed experts of `pairs` (token, expert) pairs run without reading anything back to the host
  // (FP4 experts take the tile kernel, which reads the experts' row counts back, from fp4_tiles_from_pairs_ pairs
  // except where the tensor-core grouped form takes them).
  bool experts_stay_on_device(int64_t pairs) const;

 private:
  // How FP4 routed experts run `pairs` pairs over `num_ids` ids (cuda_moe.cpp says why): the per-pair matrix-vector
  // kernels, the grouped form on the CUDA cores (the per-pair bits) or on the tensor cores, or the tiles after the
  // permutation (the only form that leaves the device).
  enum class Fp4Form { kPerPair, kGrouped, kGroupedMma, kTiles };
  Fp4Form fp4_form(int64_t pairs, int64_t num_ids) const;
  // Whether `pairs` pairs are in the tensor-core grouped form's range (fp4_mma_from_pairs_ to fp4_mma_up_to_pairs_).
  bool fp4_mma(int64_t pairs) const;
  // Whether FP8 experts take the grouped form for `pairs` pairs (from fp8_grouped_from_pairs_; cuda_moe.cpp).
  bool fp8_grouped(int64_t pairs) const;
  // out[t] += sum_k weights[t, k] * expert_{ids[t, k]}(x[t]) over this rank's experts; ids are places of the
  // expert store (the experts themselves where it holds every one) in [0, num_ids), and ids >= its capacity are
  // entries to leave out (num_ids = capacity + 1 for expert parallelism).
  // out_ready (optional): an event after which `out` may be added to (the shared expert writes it on the side
  // stream); everything before the final combine runs without waiting for it. pairs_here (>= 0): at most that
  // many entries are below the capacity (a dispatcher that knows says so), so the permuted copy is sized to them.
  // pair_rows (--batch-invariant's expert parallelism): out [rows * top_k, hidden] = each entry's own unweighted
  // output in (row, k) order instead (zeros for entries left out), on the paths that permute.
  bool routed_experts(int64_t moe_layer, const __nv_bfloat16* x, const int32_t* ids, const float* weights,
                      int64_t rows, int64_t num_ids, __nv_bfloat16* out, ScratchPool& scratch,
                      cudaEvent_t out_ready = nullptr, const ResidualNorm* then = nullptr,
                      int64_t pairs_here = -1, bool pair_rows = false) const;
  // Expert parallelism over host memory with pair outputs: the received rows run through routed_experts on the
  // device (the one-rank kernels), each entry's output returns to its token's rank, and the sum over k is
  // moe_unpermute's, so a token's bits are the one-rank run's whatever the EP layout.
  void host_exchange_pairs(int64_t moe_layer, const __nv_bfloat16* h, const int32_t* ids, const float* weights,
                           int64_t rows, __nv_bfloat16* out, ExpertDispatcher& dispatcher, ScratchPool& scratch) const;
  // The chunked GEMMs of FP4 or FP8 experts: groups of kDequantExperts dequantised into scratch, their chunks' GEMMs
  // (V3's FP8 experts take fp8_gemm_experts instead where the FP8 GEMM takes their shapes, unless it is emulated or
  // off).
  void chunked_quantized_experts(int64_t moe_layer, __nv_bfloat16* x_pad, const std::vector<int32_t>& chunk_expert,
                                 __nv_bfloat16* gate_up, __nv_bfloat16* act, __nv_bfloat16* y_perm, void** pointers,
                                 ScratchPool& scratch) const;
  // Each expert's padded rows through the FP8 GEMM against its codes as stored (activations quantised per row and
  // 128 channels once a projection, kernels/cuda/fp8_gemm.cuh), one launch an expert and projection. Padded row r
  // is x's row x_sources[r] (moe_pad_sources; zeros where negative), read where it is; the down projection's input is
  // quantised straight from gate_up (quantize_fp8_silu_mul).
  bool fp8_gemm_takes_experts() const;
  void fp8_gemm_experts(int64_t moe_layer, const __nv_bfloat16* x, const int32_t* x_sources,
                        const std::vector<int32_t>& chunk_expert, __nv_bfloat16* gate_up, __nv_bfloat16* y_perm,
                        ScratchPool& scratch) const;
  Lane main_lane() const { return {cudaStreamPerThread, cublas_.get(), config_.batch_invariant, fp8_gemm_}; }
  Lane side_lane() const { return {side_stream_.get(), side_cublas_.get(), config_.batch_invariant, fp8_gemm_}; }

  const ModelConfig& config_;
  // FP4 experts at decode, by pairs a step (cuda_moe.cpp says why): the grouped form on the tensor cores from
  // fp4_mma_from_pairs_ to fp4_mma_up_to_pairs_ (fp4_mma), else on the CUDA cores from fp4_grouped_from_pairs_ (a
  // quarter a place) to 2.5 a place, the tile kernel from fp4_tiles_from_pairs_ (which reads the experts' row counts
  // back to the host), the per-pair matrix-vector kernels otherwise.
  int64_t fp4_tiles_from_pairs_;
  int64_t fp4_grouped_from_pairs_;
  int64_t fp4_mma_from_pairs_;
  int64_t fp4_mma_up_to_pairs_;
  int64_t fp8_grouped_from_pairs_;
  CudaExpertStore& experts_;
  int num_sms_;
  StepProfiler& profiler_;
  float swiglu_limit_;
  CublasHandle cublas_;
  const Fp8Gemm fp8_gemm_ = fp8_gemm_from_environment();  // the lanes' FP8 GEMM (Lane::fp8_gemm)
  // The shared experts run here, beside the router and the routed experts (they need only the layer input).
  CudaStream side_stream_;
  CublasHandle side_cublas_{side_stream_.get()};
  CudaEvent shared_start_, shared_done_;
  // The grouped expert kernel's counters (moe_grouped.cuh): zeroed here, left zeroed by every launch.
  mutable DeviceArray<int32_t> expert_sync_;
};

}  // namespace deepinfer
