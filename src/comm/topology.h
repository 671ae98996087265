// Topology: this rank's place in the deployment — its role, its expert-parallel group, its local rank and
// GPU — and the MPI communicators of its role and EP group. Created collectively; torn down by finalize().
#pragma once

#include <mpi.h>

#include <string>
#include <utility>

#include "src/comm/deployment.h"

namespace deepinfer {

// Owns one MPI communicator. MPI_Comm_free is collective, so it happens in free(), called in the same
// order on every rank; the destructor never frees (it would be a collective on an error path).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  MpiComm(MpiComm&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  MpiComm& operator=(MpiComm&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const;
  int size() const;
  void free();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class Topology {
 public:
  // Collective over `world`. Throws InputError if the world size does not match the deployment.
  static Topology create(const Deployment& deployment, MPI_Comm world);
  static void check_world_size(const Deployment& deployment, int world_size);

  void finalize();  // collective: frees the communicators, in the same order on every rank

  const Deployment& deployment() const { return deployment_; }
  const RankPlacement& placement() const { return placement_; }
  Role role() const { return placement_.role; }
  const RoleSpec& role_spec() const { return deployment_.roles[placement_.role_spec_idx]; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int gpu() const { return gpu_; }  // -1 when this rank computes on the CPU
  const std::string& host() const { return host_; }

  MPI_Comm world() const { return world_; }
  const MpiComm& role_comm() const { return role_comm_; }  // every rank of this rank's role
  const MpiComm& ep_comm() const { return ep_comm_; }      // this rank's expert-parallel group
  const MpiComm& local_comm() const { return local_comm_; }  // ranks sharing this host's memory

 private:
  Deployment deployment_;
  RankPlacement placement_;
  MPI_Comm world_ = MPI_COMM_NULL;
  int world_rank_ = 0;
  int world_size_ = 0;
  int local_rank_ = 0;
  int local_size_ = 0;
  int gpu_ = -1;
  std::string host_;
  MpiComm role_comm_;
  MpiComm ep_comm_;
  MpiComm local_comm_;
};

}  // namespace deepinfer
