// Which prefill rank serves each request (assign_requests): least-loaded by prompt tokens, and with the prefix
// cache on, requests that share leading whole blocks go where those blocks will be.
#include <gtest/gtest.h>

#include <vector>

#include "src/engine/spmd_generation.h"

namespace deepinfer {
namespace {

Request request_of(std::vector<int32_t> tokens) {
  Request r;
  r.prompt_token_ids = std::move(tokens);
  return r;
}

std::vector<int32_t> tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = first + static_cast<int32_t>(i);
  return t;
}

TEST(Routing, LeastLoadedWithoutThePrefixCache) {
  const std::vector<Request> requests = {request_of(tokens(0, 300)), request_of(tokens(0, 200)),
                                         request_of(tokens(0, 90)), request_of(tokens(0, 90))};
  EXPECT_EQ(assign_requests(requests, 2), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(assign_requests(requests, 1), (std::vector<int>{0, 0, 0, 0}));
}

TEST(Routing, RequestsSharingBlocksGoTogether) {
  // A 150-token document (two whole 64-token blocks) opens requests 0, 2 and 3; request 1 is unrelated.
  std::vector<int32_t> doc = tokens(1000, 150);
  auto with_tail = [&](int32_t first, int64_t n) {
    std::vector<int32_t> t = doc;
    const std::vector<int32_t> tail = tokens(first, n);
    t.insert(t.end(), tail.begin(), tail.end());
    return request_of(t);
  };
  const std::vector<Request> requests = {with_tail(5, 10), request_of(tokens(7, 200)), with_tail(50, 20),
                                         with_tail(90, 5)};
  // Least-loaded: 0 -> rank 0 (160), 1 -> rank 1 (200), 2 -> rank 0 (330), 3 -> rank 1.
  EXPECT_EQ(assign_requests(requests, 2), (std::vector<int>{0, 1, 0, 1}));
  // Prefix-affine: requests 2 and 3 compute only their tails on rank 0 (128 tokens cached there).
  EXPECT_EQ(assign_requests(requests, 2, 64), (std::vector<int>{0, 1, 0, 0}));
  // A prompt no longer than one block plus its last token shares nothing.
  const std::vector<Request> short_ones = {request_of(tokens(0, 64)), request_of(tokens(0, 64))};
  EXPECT_EQ(assign_requests(short_ones, 2, 64), (std::vector<int>{0, 1}));
}

TEST(Routing, AffinityYieldsToABusierRank) {
  // Rank 0 holds the document's blocks but is far busier than the request's saving: the request goes to rank 1.
  std::vector<int32_t> doc = tokens(1000, 129);
  std::vector<Request> requests = {request_of(doc), request_of(tokens(0, 1000)), request_of(tokens(5000, 1000))};
  std::vector<int32_t> again = doc;
  again.push_back(3);
  requests.push_back(request_of(again));
  // Loads before the last request: rank 0: 129 + 1000, rank 1: 1000; cached on rank 0: 128 of its 130 tokens.
  EXPECT_EQ(assign_requests(requests, 2, 64), (std::vector<int>{0, 1, 0, 1}));
}

}  // namespace
}  // namespace deepinfer
