// DEEPINFER_HOST_DEVICE: a function compiled for the host and, under nvcc, for the device too — for the few
// definitions the CPU and CUDA forms of an op must share bit for bit (kernels/philox.h, kernels/fp_formats.h).
#pragma once

#if defined(__CUDACC__)
#define DEEPINFER_HOST_DEVICE __host__ __device__
#else
#define DEEPINFER_HOST_DEVICE
#endif
