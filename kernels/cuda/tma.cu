#include "kernels/cuda/tma.cuh"

namespace deepinfer::cuda {

namespace {

using EncodeTiled = decltype(&cuTensorMapEncodeTiled);

// The driver's encoder, looked up once through the runtime (so nothing links libcuda directly); null if the
// driver lacks it.
EncodeTiled encoder() {
  static const EncodeTiled function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return EncodeTiled{nullptr};
    return reinterpret_cast<EncodeTiled>(pointer);
  }();
  return function;
}

}  // namespace

CUresult make_bf16_tensor_map(CUtensorMap* map, const void* base, uint64_t planes, uint64_t rows, uint64_t cols,
                              uint32_t box_planes, uint32_t box_rows, uint32_t box_cols) {
  const EncodeTiled encode = encoder();
  if (encode == nullptr) return CUDA_ERROR_NOT_FOUND;
  const cuuint64_t dims[3] = {cols, rows, planes};
  const cuuint64_t strides[2] = {cols * 2, rows * cols * 2};  // bytes between rows, between planes
  const cuuint32_t box[3] = {box_cols, box_rows, box_planes};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  // The L2 fetches 256 bytes around each 128-byte box row: the next k step's piece of the row is then in the L2
  // (faster than no promotion or 128 bytes: results/h200/design-measurements.md).
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace deepinfer::cuda
