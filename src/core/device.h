// What accelerators this process can see. Compiled against the CUDA runtime when the CUDA backend is
// built; without it, or without a driver, there are no devices.
#pragma once

namespace deepinfer {

int cuda_device_count();

}  // namespace deepinfer
