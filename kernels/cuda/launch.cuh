// Programmatic dependent launch (Hopper and later). A kernel launched with launch_dependent() may be scheduled
// while the kernel before it on the stream is still finishing, so the launch latency between two short kernels
// overlaps instead of adding up (decode at batch 1 runs about 400 kernels a step, most of them a few
// microseconds long). CUDA graphs keep these programmatic edges when a stream is captured.
//
// The contract: a kernel launched this way calls begin_dependent_kernel() before it touches global memory. That
// waits until the previous grid on the stream has finished and its writes are visible (griddepcontrol.wait), so
// reads after it see the previous kernel's results and writes cannot race its reads. It also lets the next
// kernel be scheduled early (griddepcontrol.launch_dependents); that kernel waits in its own
// begin_dependent_kernel(). Called in a kernel launched plainly, both instructions do nothing.
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::cuda {

__device__ __forceinline__ void begin_dependent_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Grids of more blocks launch plainly (begin_dependent_kernel() then does nothing): a prefill-sized kernel of
// several waves has nothing to gain from starting early, and prefill measured the same with and without the
// dependent launches (results/h200/design-measurements.md).
constexpr unsigned kDependentLaunchMaxBlocks = 2048;

// kernel<<<grid, block, shared_bytes, stream>>>(args...), allowed to start before the previous kernel on the
// stream has finished (see above) where the grid is at most kDependentLaunchMaxBlocks. `cluster_y` > 1 groups
// that many consecutive blocks along y into a thread block cluster (their shared memory visible to each other;
// the grid's y a multiple of it). Errors surface through cudaGetLastError, as with <<<...>>>.
template <class... Params, class... Args>
void launch_dependent_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                                cudaStream_t stream, unsigned cluster_y, Args... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch_dependent: argument count differs from the kernel's");
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (grid.x * grid.y * grid.z <= kDependentLaunchMaxBlocks) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_y > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {1, cluster_y, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  (void)cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args... args) {
  launch_dependent_clustered(kernel, grid, block, shared_bytes, stream, 1, args...);
}

}  // namespace deepinfer::cuda
