// DEEPINFER_COMM_TIMEOUT_S (issue #52): a second at least, so that no deadline expires before the ranks can answer.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "src/core/error.h"
#include "src/comm/communicator.h"

namespace deepinfer {
namespace {

// The variable set to `value` for one call, restored after.
double timeout_with(const char* value) {
  const char* before = std::getenv("DEEPINFER_COMM_TIMEOUT_S");
  const std::string saved = before ? before : "";
  ::setenv("DEEPINFER_COMM_TIMEOUT_S", value, 1);
  double seconds = -1.0;
  try {
    seconds = default_comm_timeout_s();
  } catch (...) {
    before ? ::setenv("DEEPINFER_COMM_TIMEOUT_S", saved.c_str(), 1) : ::unsetenv("DEEPINFER_COMM_TIMEOUT_S");
    throw;
  }
  before ? ::setenv("DEEPINFER_COMM_TIMEOUT_S", saved.c_str(), 1) : ::unsetenv("DEEPINFER_COMM_TIMEOUT_S");
  return seconds;
}

TEST(CommTimeout, AtLeastASecond) {
  EXPECT_DOUBLE_EQ(timeout_with("1"), 1.0);
  EXPECT_DOUBLE_EQ(timeout_with("2.5"), 2.5);
  EXPECT_DOUBLE_EQ(timeout_with("1e7"), 1e7);
  for (const char* bad : {"1e-300", "0.999", "0", "-0", "4.9e-324", "1e7.5", "10000001", "nan", "inf", "", "1s"}) {
    try {
      timeout_with(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("DEEPINFER_COMM_TIMEOUT_S='") + bad +
                                           "' is not a number of seconds in [1, 10000000]"),
                std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace deepinfer
