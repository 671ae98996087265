// The threads the CPU ops run on (OpenMP). Ranks that share a host share its cores: unless OMP_NUM_THREADS says
// otherwise, each rank takes its share of them, so that several ranks on one host do not run several times as many
// threads as it has cores (with OpenMP's spinning waits, 4 ranks x 2 threads on 2 cores ran 3x slower than 4 x 1).
#pragma once

namespace deepinfer::cpu {

// Sets this process's share for `ranks_on_host` ranks (at least one thread); returns the threads it will use.
int share_host_threads(int ranks_on_host);

}  // namespace deepinfer::cpu
