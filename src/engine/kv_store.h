// The prefix cache's directory tier (generate --kv-store DIR), standing for DeepInfer's distributed store of
// block KV: every block a rank registers is also written to DIR, and a prompt whose next block misses on the
// rank's own blocks may find it there — written by another rank of the job or by an earlier job.
//  - One file a block, named by the block's hash (chained over its tokens and all before them) and the model key,
//    holding the tokens, the parent block's hash and the block's entries in the cache's transfer format
//    (KvCache::export_entries: [layer][token][entry_dim] fp32), then a checksum of all of it.
//  - Written once: to a temporary of a unique name in DIR, then renamed into place (atomic; two ranks writing the
//    same block write the same bytes, and whichever rename lands last stays). An existing file is not rewritten.
//  - A write that fails (a full or read-only directory) warns once and stops this rank's writes; the run goes on.
//  - Read only when whole: the magic, the sizes, the model key, the hashes, every token and the checksum must
//    match, else the file is reported once and treated as a miss (never as KV).
// The model key names what else the KV depends on (the checkpoint, its load format and seed, the device's
// arithmetic, the depth): files of another key are never read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace deepinfer {

class KvStore {
 public:
  KvStore(std::filesystem::path dir, std::string model_key, int64_t num_layers, int64_t entry_dim,
          int64_t block_size);

  // Whether DIR has a file for the block (not yet whether it is whole: load says).
  bool has(uint64_t hash) const;
  // The block's entries [num_layers, block_size, entry_dim] into `entries`, if DIR holds it whole.
  bool load(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens, std::vector<float>& entries) const;
  // Writes the block unless DIR has it already.
  void save(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens, std::span<const float> entries) const;

 private:
  std::filesystem::path path_of(uint64_t hash) const;

  std::filesystem::path dir_;
  uint64_t model_key_;
  int64_t num_layers_, entry_dim_, block_size_;
  mutable std::mt19937_64 rng_;  // the temporaries' names
  mutable bool writable_ = true;  // false after a failed write
};

}  // namespace deepinfer
