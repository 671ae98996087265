// What a result file records about the run that produced it (root attributes of the sweep and bench files).
#pragma once

#include <string>

namespace deepinfer {

std::string library_versions();  // MPI, and with CUDA the runtime and NCCL versions
std::string accelerator_name();  // GPU 0's name, or "cpu"
std::string utc_now();           // ISO 8601

}  // namespace deepinfer
