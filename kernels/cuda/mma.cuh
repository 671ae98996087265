// Warp-level tensor-core helpers shared by the attention kernels: one m16n8k16 bf16 MMA with fp32 accumulators
// (operand layouts as in the PTX ISA's mma.m16n8k16 fragments), the packing of bf16 pairs into its registers,
// and asynchronous global-to-shared copies (cp.async, sm_80+) for staging the next tile while this one computes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace deepinfer::cuda {

// d += A[16x16, row-major] . B[16x8, column-major]; a0..a3 and b0, b1 are this lane's fragments.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two consecutive bf16 values (4-byte aligned) as one fragment register.
__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t pack_pair(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

__device__ __forceinline__ uint32_t pack_floats(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// ldmatrix: 8x8 bf16 matrices from shared memory straight into MMA fragments. Each lane passes the address of
// one 16-byte row: lanes 8i..8i+7 the rows of matrix i. `trans` hands out columns instead of rows (a B operand
// stored key-major, as V is).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

// 16 bytes global -> shared without passing through registers; `valid` false writes 16 zero bytes instead.
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src, bool valid) {
  const uint32_t dst = shared_address(shared_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src), "r"(valid ? 16 : 0));
}
// The same, with the L2 told to fetch the surrounding 256 bytes from memory at once: for data streamed in long
// runs (benchmarks/moe_grouped_bench's tiled read, as the grouped expert kernels' tensor maps do). With it the
// attention kernel's cache reads got slower at long contexts, so they keep the plain copy
// (results/h200/design-measurements.md).
__device__ __forceinline__ void cp_async_16_stream(void* shared_dst, const void* global_src, bool valid) {
  const uint32_t dst = shared_address(shared_dst);
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 16 : 0));
}
// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` committed groups are still in flight (this thread's copies only).
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

}  // namespace deepinfer::cuda
