// Hopper's copy engine (the Tensor Memory Accelerator) and the shared-memory barriers its copies complete on.
// One thread issues the copy of a whole tile (cp.async.bulk.tensor, described by a CUtensorMap); the bytes land
// in shared memory and count down the transaction count of an mbarrier, which the consuming warps wait on. No
// thread spends instructions on addresses, which is what the streaming kernels need: their loads, not their
// arithmetic, had been the cost (moe_grouped.cu).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/mma.cuh"

namespace deepinfer::cuda {

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(count));
}

// Makes initialised barriers visible to the copy engine (then a __syncthreads makes them visible to the block).
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::); }

// Arrives once and adds `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(barrier)) : "memory");
}

// Arrives once when every cp.async this thread issued before has landed (the barrier's count must include
// this arrival: .noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(barrier)) : "memory");
}

// Whether the phase of parity `parity` has completed (one poll, which may wait a while in hardware).
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t address, unsigned parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(address), "r"(parity)
      : "memory");
  return done != 0;
}
inline constexpr long long kMbarrierWaitLimitCycles = 20'000'000'000LL;  // about 10 s of an SM's clock

// Waits until the phase of parity `parity` has completed. A wait that lasts about 10 s of the SM's clock is a
// bug (a copy that never lands, a miscounted arrival): it prints who waited and traps, instead of hanging.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, unsigned parity, const char* who) {
  const uint32_t address = shared_address(barrier);
  const long long start = clock64();
  while (!mbarrier_try_wait(address, parity)) {
    if (clock64() - start > kMbarrierWaitLimitCycles) {
      printf("%s: block %d thread %d waited ~10 s for barrier phase %u; trapping\n", who, blockIdx.x, threadIdx.x,
             parity);
      __trap();
    }
  }
}

// The same without the message, for kernels with warpgroup MMAs: a call (printf) anywhere in such a kernel makes
// the compiler serialise all its MMAs. A stuck wait traps (the launch fails) instead of hanging.
__device__ __forceinline__ void mbarrier_wait_silent(uint64_t* barrier, unsigned parity) {
  const uint32_t address = shared_address(barrier);
  const long long start = clock64();
  while (!mbarrier_try_wait(address, parity))
    if (clock64() - start > kMbarrierWaitLimitCycles) __trap();
}

// A box of a 3-D tensor at element coordinates (inner, middle, outer) into shared memory (aligned as the map's
// swizzle requires: 1024 bytes for 128-byte swizzling); coordinates past the tensor fill zeros, and count as
// bytes.
__device__ __forceinline__ void tma_load_3d(void* shared_dst, const CUtensorMap* map, int inner, int middle, int outer,
                                            uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(shared_address(shared_dst)),
      "l"(map), "r"(inner), "r"(middle), "r"(outer), "r"(shared_address(barrier))
      : "memory");
}

// The map of a bf16 tensor [planes, rows, cols] (row-major, cols a multiple of 8) read in boxes of box_planes x
// box_rows x box_cols (box_cols * 2 <= 128 bytes), laid out in shared memory plane after plane with 128-byte
// swizzling: the 16-byte piece c of box row r (counting rows across planes) sits at piece c ^ (r % 8) of that
// row, so ldmatrix over 8 rows at one column touches every bank once. Host side; returns the driver's error
// (CUDA_SUCCESS on success).
CUresult make_bf16_tensor_map(CUtensorMap* map, const void* base, uint64_t planes, uint64_t rows, uint64_t cols,
                              uint32_t box_planes, uint32_t box_rows, uint32_t box_cols);

}  // namespace deepinfer::cuda
