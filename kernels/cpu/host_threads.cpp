#include "kernels/cpu/host_threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

namespace deepinfer::cpu {

int share_host_threads(int ranks_on_host) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return omp_get_max_threads();  // the user's word
  const int threads = std::max(1, omp_get_num_procs() / std::max(1, ranks_on_host));
  omp_set_num_threads(threads);
  return threads;
}

}  // namespace deepinfer::cpu
