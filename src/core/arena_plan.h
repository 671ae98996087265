// Where a weight arena puts each take: the placement rule of DeviceArena (src/model/cuda/device_memory.h), kept
// apart from cudaMalloc so that a test can replay a model's takes on the CPU. Small takes share chunks; a large one
// gets a block of its own. The rule it replaces (every take into the last chunk, a take that did not fit opening a
// chunk of max(bytes, 1 GiB) and abandoning the last one's tail) reserved 137.5 GiB for the 94.9 GiB of one V3 rank
// at EP 8: a layer's expert codes (0.875 and 0.44 GiB) each opened a chunk whose tail no later take fitted.
#pragma once

#include <cstddef>

namespace deepinfer {

class ArenaPlan {
 public:
  static constexpr size_t kAlignment = 256;
  explicit ArenaPlan(size_t chunk_bytes = size_t{1} << 30) : chunk_bytes_(chunk_bytes) {}

  struct Place {
    size_t new_block_bytes;  // > 0: allocate a block of this many bytes first (the take's block)
    size_t offset;           // the take's offset in its block
    bool own_block;          // the block is the take's alone; otherwise it is the current shared chunk
  };
  // Takes of a sixteenth of a chunk or more (64 MiB of 1 GiB) get a block of their own: what a chunk abandons is
  // then less than that at a time, and never a large take's worth.
  Place take(size_t bytes) {
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    used_ += bytes;
    if (bytes >= chunk_bytes_ / 16) {
      reserved_ += bytes;
      return {bytes, 0, true};
    }
    Place place{0, used_in_chunk_, false};
    if (!has_chunk_ || used_in_chunk_ + bytes > chunk_bytes_) {
      has_chunk_ = true;
      reserved_ += chunk_bytes_;
      place = {chunk_bytes_, 0, false};
    }
    used_in_chunk_ = place.offset + bytes;
    return place;
  }
  size_t bytes_used() const { return used_; }          // the takes, each rounded up to the alignment
  size_t bytes_reserved() const { return reserved_; }  // the blocks allocated

 private:
  size_t chunk_bytes_;
  bool has_chunk_ = false;
  size_t used_in_chunk_ = 0;
  size_t used_ = 0, reserved_ = 0;
};

}  // namespace deepinfer
