// Request files: integers are read at their full width and range-checked, so that no id wraps into range.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fmt/format.h>

#include <fstream>

#include "src/app/jsonl.h"
#include "src/app/openai_batch.h"
#include "src/app/result_log.h"
#include "src/core/error.h"

namespace deepinfer {
namespace {

std::string read_error(const std::string& line) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("deepinfer-requests-{}.jsonl", ::getpid());
  {
    std::ofstream out(path);
    out << line << '\n';
  }
  std::string error;
  try {
    app::read_requests(path);
  } catch (const InputError& e) {
    error = e.what();
  }
  std::filesystem::remove(path);
  return error;
}

TEST(Requests, TokenIdsAreCheckedAtFullWidth) {
  struct Case {
    const char* line;
    const char* expected;
  };
  const Case cases[] = {
      // 2^32 + 5 once ran as token 5, 2^63 as token 0.
      {R"({"prompt_token_ids": [1, 4294967301], "max_new_tokens": 1})",
       "'prompt_token_ids' holds 4294967301, outside [0, 2147483647]"},
      {R"({"prompt_token_ids": [9223372036854775808], "max_new_tokens": 1})",
       "'prompt_token_ids' holds 9223372036854775808, outside"},
      {R"({"prompt_token_ids": [-1], "max_new_tokens": 1})", "'prompt_token_ids' holds -1, outside"},
      {R"({"prompt_token_ids": [2147483648], "max_new_tokens": 1})", "holds 2147483648, outside"},
      {R"({"prompt_token_ids": [18446744073709551616], "max_new_tokens": 1})", "not an integer"},
      {R"({"prompt_token_ids": [1.5], "max_new_tokens": 1})", "holds 1.5, not an integer"},
      {R"({"prompt_token_ids": [1], "max_new_tokens": 1, "stop_token_ids": [4294967297]})",
       "'stop_token_ids' holds 4294967297, outside [0, 2147483647]"},
      {R"({"prompt_token_ids": [1], "max_new_tokens": 1, "stop_token_ids": [-7]})", "'stop_token_ids' holds -7"},
      {R"({"prompt_token_ids": [1], "max_new_tokens": 18446744073709551615})",
       "'max_new_tokens' holds 18446744073709551615, outside [1, 9223372036854775807]"},
      {R"({"prompt_token_ids": [1], "max_new_tokens": 0})", "'max_new_tokens' holds 0, outside"},
      {R"({"prompt_token_ids": [1], "max_new_tokens": 1, "ignore_eos": 1})", "'ignore_eos' must be true or false"},
  };
  for (const Case& test : cases) {
    const std::string error = read_error(test.line);
    EXPECT_NE(error.find(test.expected), std::string::npos) << test.line << " -> " << error;
  }
}

TEST(Requests, LargestValidValuesAreKept) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("deepinfer-requests-ok-{}.jsonl", ::getpid());
  {
    std::ofstream out(path);
    out << R"({"prompt_token_ids": [0, 2147483647], "max_new_tokens": 9223372036854775807, "stop_token_ids": [7]})"
        << '\n';
  }
  const std::vector<Request> requests = app::read_requests(path);
  std::filesystem::remove(path);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].prompt_token_ids, (std::vector<int32_t>{0, 2147483647}));
  EXPECT_EQ(requests[0].max_new_tokens, 9223372036854775807);
  EXPECT_EQ(requests[0].sampling.stop_token_ids, (std::vector<int32_t>{7}));
}

// A line that is no JSON object has no id: its error record and its key name its place, so that a request whose id
// happens to equal that place is not taken for it when a job resumes.
TEST(Requests, AnUnreadableLineNeverStandsForARequestOfItsOrdinal) {
  const nlohmann::json record = app::bad_line_record(R"({"custom_id": "x1", "body": [)", 0, "malformed");
  EXPECT_TRUE(record["id"].is_null()) << record.dump();
  EXPECT_EQ(record["request"], 0);
  const std::string unreadable = app::request_key(nlohmann::json(nlohmann::json::value_t::discarded), 0);
  EXPECT_EQ(app::result_key(record), unreadable);
  EXPECT_NE(unreadable, app::request_key(nlohmann::json{{"id", 0}}, 31));
  EXPECT_NE(app::request_key(nlohmann::json::array({1, 2}), 4), app::request_key(nlohmann::json{{"id", 4}}, 9));
  EXPECT_EQ(app::request_key(nlohmann::json{{"prompt_token_ids", {1}}}, 7), "i:7") << "a line without an id: its ordinal";
}

}  // namespace
}  // namespace deepinfer
