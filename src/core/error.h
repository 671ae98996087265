// The two kinds of failure the engine reports.
//  - InputError: the user's input is wrong (a config, a flag, a JSONL line, a world size). The message is
//    written for the user, carries no file:line, and the process exits with kExitInputError.
//  - Error: the engine or the system failed (a CUDA/NCCL/MPI/HDF5 call, a broken invariant). The message
//    names where, and the process exits with kExitRuntimeError.
#pragma once

#include <stdexcept>
#include <string>

namespace deepinfer {

inline constexpr int kExitRuntimeError = 1;
inline constexpr int kExitInputError = 2;

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace deepinfer
