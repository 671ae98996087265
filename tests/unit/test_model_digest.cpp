// model_content_digest, the --kv-store key's name for the model (issue #52): the files' contents, not their path.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "src/model/model_digest.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(DEEPINFER_SOURCE_DIR) / "tests" / "fixtures" / "tiny-v3-bf16";

// A copy of the fixture's config and weights whose files keep the fixture's modification times.
fs::path copy_model(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("deepinfer-digest-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kFixture)) {
    fs::copy_file(entry.path(), dir / entry.path().filename());
    fs::last_write_time(dir / entry.path().filename(), entry.last_write_time());
  }
  return dir;
}

// Flips one byte of `file` at `offset` from its end, keeping its size and modification time.
void flip_byte(const fs::path& file, std::streamoff from_end) {
  const auto written = fs::last_write_time(file);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char byte = 0;
  f.get(byte);
  f.seekp(-from_end, std::ios::end);
  f.put(static_cast<char>(byte ^ 0x40));
  f.close();
  fs::last_write_time(file, written);
}

TEST(ModelDigest, NamesTheContentNotThePath) {
  const fs::path a = copy_model("a"), b = copy_model("b");
  const std::string digest = model_content_digest(a);
  EXPECT_EQ(digest.size(), 16u);
  EXPECT_EQ(model_content_digest(b), digest);  // the same files elsewhere
  EXPECT_EQ(model_content_digest(a), digest);  // and read again

  {  // the config edited (one value)
    std::ifstream in(b / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"rms_norm_eps\"");
    ASSERT_NE(at, std::string::npos);
    text.insert(text.find(':', at) + 1, " 2e-6, \"was\":");
    std::ofstream(b / "config.json") << text;
  }
  const std::string config_edited = model_content_digest(b);
  EXPECT_NE(config_edited, digest);

  // A weight rewritten in place (a byte of the last tensor, same size, same modification time).
  flip_byte(b / "model-00002-of-00002.safetensors", 3);
  EXPECT_NE(model_content_digest(b), config_edited);
  const std::string weights_rewritten = model_content_digest(b);
  // Touched only: the modification time is part of the key (a miss, never a stale hit).
  fs::last_write_time(b / "model-00002-of-00002.safetensors", fs::file_time_type::clock::now());
  EXPECT_NE(model_content_digest(b), weights_rewritten);

  // Files beside the weights that change what runs: the engram tables.
  const std::string before_tables = model_content_digest(a);
  std::ofstream(a / "engram_hash.json") << "{}";
  EXPECT_NE(model_content_digest(a), before_tables);

  // A bare config file (dummy weights): its bytes.
  EXPECT_EQ(model_content_digest(kFixture / "config.json"), model_content_digest(copy_model("c") / "config.json"));
  EXPECT_NE(model_content_digest(kFixture / "config.json"), model_content_digest(b / "config.json"));
  for (const char* name : {"a", "b", "c"})
    fs::remove_all(fs::temp_directory_path() / fmt::format("deepinfer-digest-{}-{}", name, ::getpid()));
}

}  // namespace
}  // namespace deepinfer
