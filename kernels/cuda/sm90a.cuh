// What the kernels built for sm_90a (kernels/cuda_sm90a: warpgroup MMAs, CUTLASS's Hopper GEMMs) share.
#pragma once

namespace deepinfer::cuda {

// The current device is of compute capability 9.0, the only one the sm_90a code runs on (H100, H200).
bool on_sm90();

}  // namespace deepinfer::cuda
