#include "src/comm/split_rows.h"

#include <vector>

#include "src/core/check.h"

namespace deepinfer {

void fetch_split_rows(Communicator& comm, std::span<const int64_t> keys, std::span<const int32_t> owners,
                      int64_t row_bytes, const ServeRows& serve, std::byte* out, const char* what) {
  DI_CHECK(keys.size() == owners.size(), "{}: {} keys but {} owners", what, keys.size(), owners.size());
  const int size = comm.size();
  // The asks grouped by owner, in their order within each owner (a counting sort).
  std::vector<int64_t> ask_counts(size, 0), ask_begin(size + 1, 0);
  for (const int32_t owner : owners) {
    DI_CHECK(owner >= 0 && owner < size, "{}: a row's owner {} is outside the group of {}", what, owner, size);
    ++ask_counts[owner];
  }
  for (int p = 0; p < size; ++p) ask_begin[p + 1] = ask_begin[p] + ask_counts[p];
  std::vector<int64_t> asked(keys.size()), position_of(keys.size());
  std::vector<int64_t> fill(ask_begin.begin(), ask_begin.end() - 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    position_of[i] = fill[owners[i]]++;
    asked[position_of[i]] = keys[i];
  }
  const std::vector<int64_t> ones(size, 1);
  std::vector<int64_t> serve_counts(size, 0);
  comm.all_to_all_v(ask_counts.data(), ones, serve_counts.data(), ones, DType::kI64, what);
  int64_t num_served = 0;
  for (const int64_t n : serve_counts) num_served += n;
  std::vector<int64_t> to_serve(num_served);
  comm.all_to_all_v(asked.data(), ask_counts, to_serve.data(), serve_counts, DType::kI64, what);

  std::vector<std::byte> served(static_cast<size_t>(num_served * row_bytes));
  if (num_served > 0) serve(to_serve, served.data());
  std::vector<int64_t> served_bytes(size), got_bytes(size);
  for (int p = 0; p < size; ++p) {
    served_bytes[p] = serve_counts[p] * row_bytes;
    got_bytes[p] = ask_counts[p] * row_bytes;
  }
  std::vector<std::byte> got(keys.size() * static_cast<size_t>(row_bytes));
  comm.all_to_all_v(served.data(), served_bytes, got.data(), got_bytes, DType::kU8, what);
  for (size_t i = 0; i < keys.size(); ++i)
    std::copy_n(got.data() + position_of[i] * row_bytes, row_bytes, out + i * row_bytes);
}

}  // namespace deepinfer
