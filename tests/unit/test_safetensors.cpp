// The safetensors reader refuses every file the format does not allow, by name, rather than reading tensor
// data some bytes off (a header length one byte short once gave NaN logits and token 0 every step).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "src/core/error.h"
#include "src/model/safetensors.h"

namespace deepinfer {
namespace {

struct RawFile {
  std::string header;                 // the JSON text
  std::string data;                   // the bytes after it
  int64_t header_length_delta = 0;    // added to the true length in the first 8 bytes
};

std::filesystem::path write_raw(const RawFile& raw, const std::string& tag) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("deepinfer-st-{}-{}.safetensors", tag, ::getpid());
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = raw.header.size() + static_cast<uint64_t>(raw.header_length_delta);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << raw.header << raw.data;
  return path;
}

std::string open_error(const std::filesystem::path& path) {
  try {
    SafetensorsFile file(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Two F32 tensors a [2] and b [3]: 20 bytes of data, a at [0, 8), b at [8, 20).
nlohmann::json valid_header() {
  return {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
          {"b", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {8, 20}}}},
          {"__metadata__", {{"format", "pt"}}}};
}

TEST(Safetensors, ValidFileOpens) {
  const auto path = write_raw({valid_header().dump() + "    ", std::string(20, '\0'), 0}, "valid");
  EXPECT_EQ(open_error(path), "");
  SafetensorsFile file(path);
  EXPECT_EQ(file.entries().size(), 2u);
  std::filesystem::remove(path);
}

TEST(Safetensors, CorruptedFilesAreRefused) {
  struct Case {
    const char* what;
    RawFile raw;
    const char* expected;  // a piece of the message
  };
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json h = valid_header();
    edit(h);
    return h.dump();
  };
  const std::string good = valid_header().dump() + "    ";  // padded, as writers align the data
  const std::string data(20, '\0');
  const std::vector<Case> cases = {
      {"header length one byte short", {good, data, -1}, "the tensors' data ends at byte 20 of the data section but "
                                                        "the file holds 21"},
      {"header length one byte long", {good, std::string(20, ' '), +1},
       "tensor 'b' has data offsets [8, 20] outside the data section of 19 bytes"},
      {"header length past the file", {good, data, 1000}, "exceeds the file"},
      {"trailing bytes", {good, data + "xx", 0}, "but the file holds 22"},
      {"overlapping ranges",
       {with([](auto& h) { h["b"]["data_offsets"] = {4, 16}; }), data, 0},
       "tensor 'b' begins at byte 4 of the data, where 'a' ends at 8"},
      {"a gap between tensors",
       {with([](auto& h) { h["b"]["data_offsets"] = {12, 24}; }), std::string(24, '\0'), 0},
       "tensor 'b' begins at byte 12 of the data, where 'a' ends at 8"},
      {"data not starting at 0",
       {with([](auto& h) {
          h["a"]["data_offsets"] = {4, 12};
          h["b"]["data_offsets"] = {12, 24};
        }),
        std::string(24, '\0'), 0},
       "tensor 'a' begins at byte 4 of the data, expected 0"},
      {"dtype x shape != bytes", {with([](auto& h) { h["b"]["shape"] = {2}; }), data, 0}, "needs 8 bytes"},
      {"offsets past the data", {with([](auto& h) { h["b"]["data_offsets"] = {8, 28}; }), data, 0},
       "outside the data section"},
      {"offsets reversed", {with([](auto& h) { h["b"]["data_offsets"] = {20, 8}; }), data, 0},
       "outside the data section"},
      {"negative dimension", {with([](auto& h) { h["b"]["shape"] = {-3}; }), data, 0}, "bad dimension -3"},
      {"negative offset", {with([](auto& h) { h["a"]["data_offsets"] = {-8, 8}; }), data, 0},
       "two unsigned 'data_offsets'"},
      {"huge shape", {with([](auto& h) { h["b"]["shape"] = {20, 4611686018427387904ull}; }), data, 0}, ""},
      {"unknown dtype", {with([](auto& h) { h["b"]["dtype"] = "Q4"; }), data, 0}, "unsupported safetensors dtype 'Q4'"},
      {"header not an object", {"[1, 2, 3]", data, 0}, "not a JSON object"},
      {"header not JSON", {"{\"a\": ", data, 0}, "malformed safetensors header"},
      {"shorter than the length field", {"", "", -8}, ""},
  };
  for (const Case& test : cases) {
    const auto path = write_raw(test.raw, "bad");
    const std::string error = open_error(path);
    EXPECT_NE(error, "") << test.what << ": accepted";
    EXPECT_NE(error.find(test.expected), std::string::npos) << test.what << ": " << error;
    std::filesystem::remove(path);
  }
}

TEST(Safetensors, ZeroSizedTensorsTileTheData) {
  nlohmann::json h = valid_header();
  h["empty"] = {{"dtype", "F32"}, {"shape", {0, 5}}, {"data_offsets", {8, 8}}};
  const auto path = write_raw({h.dump(), std::string(20, '\0'), 0}, "empty");
  EXPECT_EQ(open_error(path), "");
  std::filesystem::remove(path);
}

// A sharded checkpoint: shards a and b both hold `x` (1s in a, 2s in b) and the index puts it in b; each shard holds
// its own tensor too. `weight_map` may be edited before it is written.
std::filesystem::path sharded_checkpoint(const std::string& tag, nlohmann::json weight_map) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("deepinfer-st-shards-{}-{}", tag, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto filled = [](float value) {
    Tensor t = Tensor::zeros({2});
    t.data<float>()[0] = t.data<float>()[1] = value;
    return t;
  };
  write_safetensors(dir / "a.safetensors", {{"x", filled(1)}, {"only_a", filled(3)}});
  write_safetensors(dir / "b.safetensors", {{"x", filled(2)}, {"only_b", filled(4)}});
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  return dir;
}

TEST(Safetensors, AShardedCheckpointReadsEachTensorFromTheShardItsIndexNames) {
  const auto dir = sharded_checkpoint("ok", {{"x", "b.safetensors"}, {"only_a", "a.safetensors"},
                                             {"only_b", "b.safetensors"}});
  const SafetensorsCheckpoint checkpoint(dir);
  EXPECT_EQ(checkpoint.read("x").data<float>()[0], 2.0f);  // b's, as the index says, though a comes first
  EXPECT_EQ(checkpoint.file_of("x"), (dir / "b.safetensors").string());
  EXPECT_EQ(checkpoint.read("only_a").data<float>()[0], 3.0f);
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, AnIndexThatPointsElsewhereOrAtTheWrongShardIsRefused) {
  for (const auto& [file, expected] : std::vector<std::pair<std::string, std::string>>{
           {"/etc/passwd", "weight_map puts 'x' in '/etc/passwd', which is not a file of the checkpoint's directory"},
           {"../b.safetensors", "which is not a file of the checkpoint's directory"},
           {"a.safetensors", ""}}) {  // a holds x too: allowed
    const auto dir = sharded_checkpoint("bad", {{"x", file}, {"only_a", "a.safetensors"}, {"only_b", "b.safetensors"}});
    std::string error;
    try {
      const SafetensorsCheckpoint checkpoint(dir);
      EXPECT_EQ(checkpoint.read("x").data<float>()[0], 1.0f) << file;
    } catch (const InputError& e) {
      error = e.what();
    }
    EXPECT_EQ(error.empty(), expected.empty()) << file << ": " << error;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    std::filesystem::remove_all(dir);
  }
  // only_b listed in a, which does not hold it.
  const auto dir = sharded_checkpoint("wrong", {{"x", "b.safetensors"}, {"only_a", "a.safetensors"},
                                                {"only_b", "a.safetensors"}});
  std::string error;
  try {
    const SafetensorsCheckpoint checkpoint(dir);
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("weight_map puts 'only_b' in 'a.safetensors', which does not hold it"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
