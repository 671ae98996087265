// Fetching rows of a table that the ranks of a group hold in parts (model/row_shard.h), in three all-to-all-v
// exchanges: how many rows each rank asks of each, which, and the rows' bytes back. Every rank of the group calls
// it at the same point of every step, with no rows when it needs none (as with the MoE dispatch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "src/comm/communicator.h"

namespace deepinfer {

// Copies the rows named by `keys` (as the asking ranks sent them) that this rank holds, row_bytes each, into out.
using ServeRows = std::function<void(std::span<const int64_t> keys, std::byte* out)>;

// out[i * row_bytes ...] = the row `keys[i]`, served by rank owners[i] of `comm` (this rank included). keys are
// opaque here: the serving side's callback reads them. `what` names the exchange in timeout messages.
void fetch_split_rows(Communicator& comm, std::span<const int64_t> keys, std::span<const int32_t> owners,
                      int64_t row_bytes, const ServeRows& serve, std::byte* out, const char* what);

}  // namespace deepinfer
