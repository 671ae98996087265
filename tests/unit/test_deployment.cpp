#include <gtest/gtest.h>

#include "src/core/error.h"
#include "src/comm/deployment.h"

namespace deepinfer {
namespace {

std::string error_of(std::string_view text) {
  try {
    Deployment::from_toml_string(text, "test.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Deployment, ReadsDisaggregatedRolesInRankOrder) {
  const Deployment d = Deployment::from_toml_string(
      "name = \"x\"\n[decode]\nranks = 64\nep_size = 16\nmax_running = 8\n[prefill]\nranks = 4\n", "t.toml");
  EXPECT_EQ(d.name, "x");
  ASSERT_EQ(d.roles.size(), 2u);
  EXPECT_EQ(d.roles[0].role, Role::kPrefill);  // prefill first whatever the file order
  EXPECT_EQ(d.roles[0].ep_size, 4);            // defaults to all ranks of the role
  EXPECT_EQ(d.roles[1].num_ep_groups(), 4);
  EXPECT_EQ(d.roles[1].max_running, 8);
  EXPECT_EQ(d.world_size(), 68);
}

TEST(Deployment, PlacesRanksByRoleAndEpGroup) {
  const Deployment d =
      Deployment::from_toml_string("[prefill]\nranks = 4\n[decode]\nranks = 8\nep_size = 4\n", "t.toml");
  const RankPlacement p3 = place_rank(d, 3);
  EXPECT_EQ(p3.role, Role::kPrefill);
  EXPECT_EQ(p3.rank_in_role, 3);
  const RankPlacement p10 = place_rank(d, 10);
  EXPECT_EQ(p10.role, Role::kDecode);
  EXPECT_EQ(p10.rank_in_role, 6);
  EXPECT_EQ(p10.ep_group_idx, 1);
  EXPECT_EQ(p10.rank_in_ep_group, 2);
}

TEST(Deployment, ColocatedIsOneRole) {
  const Deployment d = Deployment::from_toml_string("[colocated]\nranks = 4\nep_size = 2\n", "c.toml");
  ASSERT_EQ(d.roles.size(), 1u);
  EXPECT_EQ(d.name, "c");
  EXPECT_EQ(place_rank(d, 3).ep_group_idx, 1);
}

TEST(Deployment, RejectsBadInputWithAClearMessage) {
  EXPECT_NE(error_of("[prefill]\nranks = 4\n[decode]\nranks = 4\nrank = 3\n").find("unknown key 'rank'"),
            std::string::npos);
  EXPECT_NE(error_of("[prefil]\nranks = 4\n").find("unknown key 'prefil'"), std::string::npos);
  // One name per concept: the running-request limit is max_running, as --max-running.
  EXPECT_NE(error_of("[prefill]\nranks = 4\nmax_requests = 8\n[decode]\nranks = 4\n")
                .find("'max_requests' is now 'max_running'"),
            std::string::npos);
  EXPECT_NE(error_of("[prefill]\nranks = 4\n[decode]\nranks = 6\nep_size = 4\n").find("does not divide"),
            std::string::npos);
  EXPECT_NE(error_of("[prefill]\nranks = 4\n").find("needs both"), std::string::npos);
  EXPECT_NE(error_of("[colocated]\nranks = 2\n[decode]\nranks = 2\n").find("cannot be combined"),
            std::string::npos);
  EXPECT_NE(error_of("[colocated]\nranks = 0\n").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("[colocated]\nranks = \"two\"\n").find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of("[colocated\nranks = 2\n").find("malformed TOML"), std::string::npos);
  EXPECT_NE(error_of("[colocated]\nep_size = 2\n").find("missing key 'ranks'"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
