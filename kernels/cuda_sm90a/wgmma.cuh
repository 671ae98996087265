// What the warpgroup-MMA kernels of this folder share: operands in shared memory as 128-byte swizzle atoms of 64 rows
// (the layout a wgmma descriptor with 128-byte swizzling reads), their descriptors, and the fences around the MMAs.
// CuTe's wrappers issue the instructions (cute/arch/mma_sm90_gmma.hpp); sm_90a only.
#pragma once

#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cuda/mma.cuh"

namespace deepinfer::cuda::wgmma {

namespace gmma = cute::SM90::GMMA;

inline constexpr int kAtomBytes = 64 * 128;  // 64 rows of one 128-byte swizzle atom (64 bf16 of each row)
inline constexpr float kLog2e = 1.4426950408889634f;

// Byte offset of row `row`, 16-byte piece `unit` of a K-major operand in atoms of 64 rows (piece u of a row's atom
// lands at u ^ (row % 8)); the operand's base 1,024-byte aligned (the swizzle repeats every 1,024 bytes).
__device__ __forceinline__ uint32_t swizzled(int row, int unit) {
  return (unit / 8) * kAtomBytes + row * 128 + (((unit % 8) ^ (row % 8)) << 4);
}

// The first 1,024-byte boundary in dynamic shared memory (callers ask for 1,024 bytes more than they use).
__device__ __forceinline__ unsigned char* aligned_shared(unsigned char* raw) {
  return raw + ((1024 - shared_address(raw) % 1024) % 1024);
}

__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes) {
  cute::GmmaDescriptor d;
  d.bitfield.start_address_ = static_cast<uint16_t>((address & 0x3FFFF) >> 4);
  d.bitfield.leading_byte_offset_ = static_cast<uint16_t>(leading_bytes >> 4);
  d.bitfield.stride_byte_offset_ = 1024 >> 4;  // 8-row groups
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ = static_cast<uint8_t>(gmma::LayoutType::B128);
  return d.desc_;
}
// K-major operands (rows along M or N, the reduction along a row: the leading offset unused) and MN-major ones (the
// same atoms read with their 64 columns as M or N: atoms kAtomBytes apart along it, 8-row groups along K).
__device__ __forceinline__ uint64_t k_major(uint32_t address) { return descriptor(address, 16); }
__device__ __forceinline__ uint64_t mn_major(uint32_t address) { return descriptor(address, kAtomBytes); }

// One MMA of both operands in shared memory into the accumulators d (CuTe's wrapper takes them one by one).
template <class Mma, size_t... I>
__device__ __forceinline__ void mma_ss(uint64_t a, uint64_t b, float (&d)[sizeof...(I)], gmma::ScaleOut scale,
                                       std::index_sequence<I...>) {
  Mma::fma(a, b, d[I]..., scale);
}
// The same with A from registers (four 32-bit registers: the m16n8k16 A fragment's layout, a warp 16 rows).
template <class Mma, size_t... I>
__device__ __forceinline__ void mma_rs(const uint32_t (&a)[4], uint64_t b, float (&d)[sizeof...(I)],
                                       std::index_sequence<I...>) {
  Mma::fma(a[0], a[1], a[2], a[3], b, d[I]..., gmma::ScaleOut::One);
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs.
template <size_t N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (size_t i = 0; i < N; ++i) cute::warpgroup_fence_operand(d[i]);
}

// The accumulators of a warp's row are spread over its 4-lane quad (lane / 4 the row): their maximum and sum.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
// Accumulators o (a thread's two rows: value i of row (i / 2) % 2) times their row's online-softmax correction.
template <size_t N>
__device__ __forceinline__ void rescale_rows(float (&o)[N], const float (&correction)[2]) {
#pragma unroll
  for (size_t i = 0; i < N; ++i) o[i] *= correction[(i / 2) % 2];
}

// Shared-memory writes by threads (cp.async, stores) made visible to the MMAs, which read through the async proxy.
__device__ __forceinline__ void fence_shared_for_mma() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace deepinfer::cuda::wgmma
