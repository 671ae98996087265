// kernels/cuda/fp8_gemm.cuh's kernels. This folder is built for sm_90a only (kernels/CMakeLists.txt): the warpgroup
// MMAs CUTLASS's Hopper kernels issue exist on no other target.
#include "kernels/cuda/fp8_gemm.cuh"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_codes.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sm90a.cuh"
#include "kernels/fp_formats.h"

namespace deepinfer::cuda {

namespace {

// The GEMM as CUTLASS composes it: A the activations [m, k] row-major, B the weight [n, k] row-major (CUTLASS's
// column-major k x n), D bf16 [m, n] row-major; no source C. The activations' scales a row and 128 columns, stored
// with m fastest (GMMA::Major::MN; described to CUTLASS as fp8_activation_scale_stride(m) rows, the rows past m
// feeding only rows of the tile that are not stored), the weight's a 128 x 128 tile with k fastest (the
// checkpoint's weight_scale_inv [n / 128, k / 128]).
namespace sm90 {

using namespace cute;

using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignmentAB = 16;  // elements of a 16-byte access
constexpr int kAlignmentD = 8;
using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _2, _1>;
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kFp8GemmGroup, kFp8GemmGroup, GMMA::Major::MN,
                                                              GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignmentD, ElementD, LayoutD,
    kAlignmentD, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA, LayoutSFA>, kAlignmentAB,
    ElementB, cute::tuple<LayoutB, LayoutSFB>, kAlignmentAB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

typename Gemm::Arguments arguments(const uint8_t* x_codes, const float* x_scales, const uint8_t* w_codes,
                                   const float* w_scales, __nv_bfloat16* y, int64_t y_row, int64_t m, int64_t n,
                                   int64_t k, int64_t x_scale_stride) {
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const int scale_rows = static_cast<int>(x_scale_stride);
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, make_shape(M, N, 1));
  get<0>(stride_d) = y_row;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {reinterpret_cast<const ElementA*>(x_codes), cutlass::make_cute_packed_stride(StrideA{}, make_shape(M, K, 1)),
       reinterpret_cast<const ElementB*>(w_codes), cutlass::make_cute_packed_stride(StrideB{}, make_shape(N, K, 1)),
       x_scales, ScaleConfig::tile_atom_to_shape_SFA(make_shape(scale_rows, N, K, 1)), w_scales,
       ScaleConfig::tile_atom_to_shape_SFB(make_shape(M, N, K, 1))},
      {{}, nullptr, cutlass::make_cute_packed_stride(StrideC{}, make_shape(M, N, 1)),
       reinterpret_cast<ElementD*>(y), stride_d}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  return args;
}

}  // namespace sm90

// The quantiser's inputs: eight consecutive values of a row, as floats.
// x's rows where they are, row r from x's row sources[r] (a row of zeros where negative) when sources is given.
struct RowsOfX {
  const __nv_bfloat16* x;
  int64_t x_row;
  const int32_t* sources;
  __device__ __forceinline__ void load(int64_t row, int64_t column, float (&v)[8]) const {
    const int64_t source = sources != nullptr ? sources[row] : row;
    const uint4 raw =
        source >= 0 ? *reinterpret_cast<const uint4*>(x + source * x_row + column) : make_uint4(0, 0, 0, 0);
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
};
// silu(gate) * up of gate_up's rows [gate | up] (inter each), rounded to bf16 as silu_mul stores it (the same
// expression, so the same bits), without storing it.
struct SiluMulOfGateUp {
  const __nv_bfloat16* gate_up;
  int64_t inter;
  float swiglu_limit;
  __device__ __forceinline__ void load(int64_t row, int64_t column, float (&v)[8]) const {
    const __nv_bfloat16* gate = gate_up + row * 2 * inter + column;
    const uint4 g_raw = *reinterpret_cast<const uint4*>(gate), u_raw = *reinterpret_cast<const uint4*>(gate + inter);
    const auto* g_pairs = reinterpret_cast<const __nv_bfloat162*>(&g_raw);
    const auto* u_pairs = reinterpret_cast<const __nv_bfloat162*>(&u_raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 g2 = __bfloat1622float2(g_pairs[i]), u2 = __bfloat1622float2(u_pairs[i]);
      const float gs[2] = {g2.x, g2.y}, us[2] = {u2.x, u2.y};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float g = gs[j], u = us[j];
        clamp_swiglu(g, u, swiglu_limit);
        v[2 * i + j] = __bfloat162float(__float2bfloat16(g / (1.0f + __expf(-g)) * u));
      }
    }
  }
};

// Sixteen threads a (row, 128 columns) group, thread i its columns [8 i, 8 i + 8); a block 16 rows of one group, so
// the scales it writes (rows fastest) are 64 contiguous bytes. The group's largest magnitude, scale = amax / 448,
// codes = e4m3(value / scale) by the hardware conversion (round to nearest even, saturating at 448: the CPU's
// e4m3_code of the clamped quotient for every float, and a tenth of its instructions; the warp a group with that
// software conversion had cost 125 us for 4,096 x 7,168 on an H200), quantize_fp8_scaled's rule on a 1 x 128 tile.
// The padding rows' scales are written 1 (TMA reads them, for rows of the tile that are not stored).
constexpr int kQuantizeRows = 16;  // a block's rows: 16 threads each, 256 threads
template <class Values>
__global__ void __launch_bounds__(256)
    quantize_activations_kernel(Values values, int64_t rows, int64_t k, uint8_t* codes, float* scales) {
  begin_dependent_kernel();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kQuantizeRows + threadIdx.x / 16, group = blockIdx.y;
  const int64_t stride = fp8_activation_scale_stride(rows);
  const int piece = threadIdx.x % 16;
  if (row >= rows) {
    if (row < stride && piece == 0) scales[group * stride + row] = 1.0f;
    return;
  }
  const int64_t column = group * kFp8GemmGroup + 8 * piece;
  float v[8];
  values.load(row, column, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int lanes = 8; lanes >= 1; lanes /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, lanes));
  const float scale = fp8_tile_scale(amax);
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // The quotient as the CPU forms it (a correctly rounded division), clamped as e4m3_code's callers clamp it.
    const float2 q = make_float2(fminf(fmaxf(v[2 * i] / scale, -448.0f), 448.0f),
                                 fminf(fmaxf(v[2 * i + 1] / scale, -448.0f), 448.0f));
    packed[i / 2] |= static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3)) << (16 * (i % 2));
  }
  *reinterpret_cast<uint2*>(codes + row * k + column) = make_uint2(packed[0], packed[1]);
  if (piece == 0) scales[group * stride + row] = scale;
}

template <class Values>
void launch_quantize(const Values& values, int64_t rows, int64_t k, uint8_t* codes, float* scales,
                     cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  const int64_t stride = fp8_activation_scale_stride(rows);
  const dim3 grid(static_cast<unsigned>((stride + kQuantizeRows - 1) / kQuantizeRows),
                  static_cast<unsigned>(k / kFp8GemmGroup));
  launch_dependent(quantize_activations_kernel<Values>, grid, 256, 0, stream, values, rows, k, codes, scales);
}

// The inverse for a reference path: a thread 4 columns of a row, x = bf16(code * the group's scale).
__global__ void __launch_bounds__(256) dequantize_activations_kernel(const uint8_t* codes, const float* scales,
                                                                     int64_t rows, int64_t k, __nv_bfloat16* x) {
  begin_dependent_kernel();
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= rows * k) return;
  const int64_t row = i / k, column = i % k;
  const float scale = scales[column / kFp8GemmGroup * fp8_activation_scale_stride(rows) + row];
  const uint32_t four = *reinterpret_cast<const uint32_t*>(codes + i);
  const float2 lo = e4m3x2_to_float2(four & 0xffffu), hi = e4m3x2_to_float2(four >> 16);
  auto* out = reinterpret_cast<__nv_bfloat162*>(x + i);
  out[0] = __floats2bfloat162_rn(lo.x * scale, lo.y * scale);
  out[1] = __floats2bfloat162_rn(hi.x * scale, hi.y * scale);
}

}  // namespace

void dequantize_fp8_activations(const uint8_t* codes, const float* scales, int64_t rows, int64_t k,
                                __nv_bfloat16* x, cudaStream_t stream) {
  if (rows == 0 || k == 0) return;  // k a multiple of 128 (fp8_gemm_supports)
  launch_dependent(dequantize_activations_kernel, dim3(static_cast<unsigned>((rows * k / 4 + 255) / 256)), 256, 0,
                   stream, codes, scales, rows, k, x);
}

bool fp8_gemm_supports(int64_t m, int64_t n, int64_t k, const Fp8BlockScales& w_scales, int64_t y_row) {
  return m > 0 && m < (int64_t{1} << 31) && n > 0 && k > 0 && n % kFp8GemmGroup == 0 && k % kFp8GemmGroup == 0 &&
         n <= y_row &&
         y_row % sm90::kAlignmentD == 0 && w_scales.f32 && w_scales.block == kFp8GemmGroup && on_sm90();
}

size_t fp8_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k) {
  return sm90::Gemm::get_workspace_size(
      sm90::arguments(nullptr, nullptr, nullptr, nullptr, nullptr, n, m, n, k, fp8_activation_scale_stride(m)));
}

void quantize_fp8_activations(const __nv_bfloat16* x, int64_t x_row, int64_t rows, int64_t k, uint8_t* codes,
                              float* scales, cudaStream_t stream, const int32_t* source_rows) {
  launch_quantize(RowsOfX{x, x_row, source_rows}, rows, k, codes, scales, stream);
}

void quantize_fp8_silu_mul(const __nv_bfloat16* gate_up, int64_t rows, int64_t inter, float swiglu_limit,
                           uint8_t* codes, float* scales, cudaStream_t stream) {
  launch_quantize(SiluMulOfGateUp{gate_up, inter, swiglu_limit}, rows, inter, codes, scales, stream);
}

bool fp8_gemm(const uint8_t* x_codes, const float* x_scales, const uint8_t* w_codes, const float* w_scales,
              __nv_bfloat16* y, int64_t y_row, int64_t m, int64_t n, int64_t k, void* workspace,
              size_t workspace_bytes, cudaStream_t stream, int64_t x_scale_stride) {
  if (x_scale_stride == 0) x_scale_stride = fp8_activation_scale_stride(m);
  if (x_scale_stride < m || x_scale_stride % 4 != 0) return false;
  // TMA reads and writes 16-byte-aligned addresses; CUTLASS does not check them.
  for (const void* p : {static_cast<const void*>(x_codes), static_cast<const void*>(x_scales),
                        static_cast<const void*>(w_codes), static_cast<const void*>(y)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  const auto args = sm90::arguments(x_codes, x_scales, w_codes, w_scales, y, y_row, m, n, k, x_scale_stride);
  sm90::Gemm gemm;
  if (sm90::Gemm::get_workspace_size(args) > workspace_bytes) return false;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return false;
  return gemm.run(stream) == cutlass::Status::kSuccess;
}

}  // namespace deepinfer::cuda
