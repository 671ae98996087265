// The drawn routing of bench --rank-slice and sweep --routing: a pure function of (seed, step, layer, token), top_k
// distinct experts with weights 1 / top_k, uniform spread evenly, zipf skewed toward a per-layer permutation.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "src/core/check.h"
#include "src/moe/synthetic_routing.h"

namespace deepinfer {
namespace {

std::vector<int64_t> histogram(const SyntheticRouting& routing, int64_t layer, int64_t num_experts, int64_t tokens) {
  std::vector<int64_t> counts(num_experts, 0);
  std::vector<int32_t> ids(routing.top_k());
  std::vector<float> weights(routing.top_k());
  for (int64_t t = 0; t < tokens; ++t) {
    routing.route(3, layer, t, ids.data(), weights.data());
    for (int32_t e : ids) ++counts[e];
  }
  return counts;
}

TEST(SyntheticRouting, DistinctExpertsDependingOnlyOnTheirKey) {
  for (const char* spec : {"uniform", "zipf:1.5", "zipf:2"}) {
    const SyntheticRouting a(spec, 9, 4, 64, 6), b(spec, 9, 4, 64, 6), other_seed(spec, 10, 4, 64, 6);
    std::vector<int32_t> ia(6), ib(6), ic(6);
    std::vector<float> wa(6), wb(6), wc(6);
    int64_t differ = 0;
    for (int64_t t = 0; t < 200; ++t) {
      a.route(5, 2, t, ia.data(), wa.data());
      b.route(5, 2, t, ib.data(), wb.data());
      other_seed.route(5, 2, t, ic.data(), wc.data());
      EXPECT_EQ(ia, ib) << spec;
      EXPECT_EQ(std::set<int32_t>(ia.begin(), ia.end()).size(), 6u) << spec;
      EXPECT_TRUE(std::all_of(ia.begin(), ia.end(), [](int32_t e) { return e >= 0 && e < 64; }));
      EXPECT_TRUE(std::all_of(wa.begin(), wa.end(), [](float w) { return w == 1.0f / 6; }));
      differ += ia != ic;
    }
    EXPECT_GT(differ, 150) << spec << ": another seed draws other experts";
  }
}

TEST(SyntheticRouting, UniformSpreadsEvenlyZipfSkews) {
  const int64_t E = 32, tokens = 20000;
  const std::vector<int64_t> uniform = histogram(SyntheticRouting("uniform", 1, 2, E, 4), 0, E, tokens);
  const double mean = 4.0 * tokens / E;  // 2,500
  for (int64_t c : uniform) EXPECT_NEAR(static_cast<double>(c), mean, 0.1 * mean);
  const SyntheticRouting zipf("zipf:1.2", 1, 2, E, 4);
  const std::vector<int64_t> layer0 = histogram(zipf, 0, E, tokens), layer1 = histogram(zipf, 1, E, tokens);
  const auto hottest0 = std::max_element(layer0.begin(), layer0.end()) - layer0.begin();
  const auto hottest1 = std::max_element(layer1.begin(), layer1.end()) - layer1.begin();
  EXPECT_GT(static_cast<double>(layer0[hottest0]), 4.0 * static_cast<double>(*std::min_element(layer0.begin(), layer0.end())));
  EXPECT_NE(hottest0, hottest1) << "each layer has its own popularity order";
}

TEST(SyntheticRouting, RefusesWhatItCannotDraw) {
  EXPECT_THROW(SyntheticRouting("zipf:0", 1, 2, 8, 2), InputError);
  EXPECT_THROW(SyntheticRouting("zipf:2.5", 1, 2, 8, 2), InputError);
  EXPECT_THROW(SyntheticRouting("zipf:x", 1, 2, 8, 2), InputError);
  EXPECT_THROW(SyntheticRouting("normal", 1, 2, 8, 2), InputError);
  EXPECT_THROW(SyntheticRouting("uniform", 1, 2, 8, 9), InputError);
}

}  // namespace
}  // namespace deepinfer
