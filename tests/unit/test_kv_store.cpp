// The --kv-store directory tier against what else may sit in its directory (issue #52): a named pipe or a directory
// where a block file belongs is a miss, never a blocked open(); unfinished files of writers that died are removed at
// start, those of live writers kept.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <vector>

#include <fmt/format.h>

#include "src/engine/kv_store.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLayers = 2, kEntryDim = 3, kBlock = 4;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("deepinfer-kvstore-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  return dir;
}

std::vector<fs::path> block_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".kvblock") files.push_back(entry.path());
  return files;
}

// One block saved by a first store; the path of its file.
fs::path save_one_block(const fs::path& dir, const std::vector<int32_t>& tokens) {
  const KvStore store(dir, "model", kLayers, kEntryDim, kBlock);
  std::vector<float> entries(kLayers * kBlock * kEntryDim, 1.5f);
  store.save(11, 0, tokens, entries);
  const std::vector<fs::path> files = block_files(dir);
  EXPECT_EQ(files.size(), 1u);
  return files.at(0);
}

// load() of the block whose file was replaced by something else: a miss within seconds. If it blocks (the bug),
// the pipe is opened for writing to release it and the test fails instead of hanging.
void expect_quick_miss(const fs::path& dir, const fs::path& file, const std::vector<int32_t>& tokens) {
  const KvStore store(dir, "model", kLayers, kEntryDim, kBlock);
  EXPECT_FALSE(store.has(11)) << file;
  auto loading = std::async(std::launch::async, [&] {
    std::vector<float> entries;
    return store.load(11, 0, tokens, entries);
  });
  if (loading.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "load() of " << file << " blocked";
    const int fd = ::open(file.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_FALSE(loading.get()) << file;
}

TEST(KvStoreFiles, PipeOrDirectoryInPlaceOfABlockIsAMiss) {
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  for (const char* kind : {"fifo", "directory", "oversized"}) {
    const fs::path dir = fresh_dir(kind);
    const fs::path file = save_one_block(dir, tokens);
    {  // the saved block reads back: the replacement below is what makes the miss
      const KvStore store(dir, "model", kLayers, kEntryDim, kBlock);
      std::vector<float> entries;
      ASSERT_TRUE(store.load(11, 0, tokens, entries));
      EXPECT_EQ(entries.size(), static_cast<size_t>(kLayers * kBlock * kEntryDim));
    }
    fs::remove(file);
    if (std::string(kind) == "fifo") ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    else if (std::string(kind) == "directory") fs::create_directory(file);
    else std::ofstream(file) << std::string(1 << 20, 'x');  // a regular file far past a block's size
    if (std::string(kind) == "oversized") {
      const KvStore store(dir, "model", kLayers, kEntryDim, kBlock);
      std::vector<float> entries;
      EXPECT_FALSE(store.load(11, 0, tokens, entries));
    } else {
      expect_quick_miss(dir, file, tokens);
    }
    fs::remove_all(dir);
  }
}

TEST(KvStoreFiles, StalePartialsAreRemovedAtStart) {
  const fs::path dir = fresh_dir("partials");
  fs::create_directories(dir);
  const std::string stale = ".00000000000000aa.partial.4242.00000000000000bb";
  const std::string fresh = ".00000000000000cc.partial.4243.00000000000000dd";
  const std::string other = "notes.partial.txt";  // not a store temporary: never touched, however old
  for (const std::string& name : {stale, fresh, other}) std::ofstream(dir / name) << "half a block";
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(dir / stale, hour_ago);
  fs::last_write_time(dir / other, hour_ago);
  const fs::path old_pipe = dir / ".00000000000000ee.partial.4244.00000000000000ff";
  ASSERT_EQ(::mkfifo(old_pipe.c_str(), 0600), 0);  // not a regular file: left alone
  const KvStore store(dir, "model", kLayers, kEntryDim, kBlock);
  EXPECT_FALSE(fs::exists(dir / stale));
  EXPECT_TRUE(fs::exists(dir / fresh));  // a writer may be about to rename it
  EXPECT_TRUE(fs::exists(dir / other));
  EXPECT_TRUE(fs::exists(old_pipe));
  // 9 minutes old: still within the bound.
  fs::last_write_time(dir / fresh, fs::file_time_type::clock::now() - std::chrono::minutes(9));
  const KvStore again(dir, "model", kLayers, kEntryDim, kBlock);
  EXPECT_TRUE(fs::exists(dir / fresh));
  fs::last_write_time(dir / fresh, fs::file_time_type::clock::now() - std::chrono::minutes(11));
  const KvStore third(dir, "model", kLayers, kEntryDim, kBlock);
  EXPECT_FALSE(fs::exists(dir / fresh));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
