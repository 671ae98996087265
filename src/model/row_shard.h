// A table split by rows across the ranks of a group: part p of `parts` holds the contiguous rows
// [p * per, min((p + 1) * per, rows)), per = ceil(rows / parts). DeepSeek-V4.1's engram tables (~196 B parameters
// in the release) are held so across an EP group (DeepInfer's engram_parallel_size), each step fetching the rows
// its tokens hash to from their owners (ExpertDispatcher::fetch_split_rows).
#pragma once

#include <algorithm>
#include <cstdint>

namespace deepinfer {

struct RowShard {
  int64_t part = 0, parts = 1;

  bool whole() const { return parts == 1; }
  int64_t rows_per_part(int64_t rows) const { return (rows + parts - 1) / parts; }
  int64_t first(int64_t rows) const { return std::min(part * rows_per_part(rows), rows); }
  int64_t count(int64_t rows) const { return std::min(rows, first(rows) + rows_per_part(rows)) - first(rows); }
  // The part that holds `row` of a table of `rows`.
  int64_t owner(int64_t row, int64_t rows) const { return row / rows_per_part(rows); }
};

}  // namespace deepinfer
