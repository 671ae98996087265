// Outputs: refused before the work when they cannot be written or would destroy an input; written whole or not
// at all, every failed write and close seen (a full disk once renamed a truncated JSONL into place).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "src/core/error.h"
#include "src/core/files.h"
#include "src/core/hdf5_file.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("deepinfer-files-{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path file(const std::string& name, const std::string& contents) const {
    std::ofstream(dir_ / name) << contents;
    return dir_ / name;
  }
  // The directory's entries, to see that nothing (a stray temporary) was left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::string output_error(const fs::path& out, const std::vector<fs::path>& inputs, bool special = true) {
    try {
      check_output_path(out, "--output", inputs, special);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(Files, OutputThatAliasesAnInputIsRefused) {
  const fs::path input = file("requests.jsonl", "{}\n");
  EXPECT_NE(output_error(input, {input}).find("is the same file as the input"), std::string::npos);
  fs::create_symlink(input, dir_ / "link.jsonl");
  EXPECT_NE(output_error(dir_ / "link.jsonl", {input}).find("is the same file as the input"), std::string::npos);
  fs::create_hard_link(input, dir_ / "hard.jsonl");
  EXPECT_NE(output_error(dir_ / "hard.jsonl", {input}).find("is the same file as the input"), std::string::npos);
  EXPECT_NE(output_error(dir_ / "." / "requests.jsonl", {input}).find("same file"), std::string::npos);
  EXPECT_EQ(output_error(dir_ / "other.jsonl", {input}), "");
  EXPECT_EQ(output_error(file("old.jsonl", "x"), {input}), "");  // replacing an old result is fine
}

TEST_F(Files, OutputThatCannotBeWrittenIsRefusedUpFront) {
  EXPECT_NE(output_error(dir_, {}).find("is a directory"), std::string::npos);
  EXPECT_NE(output_error(dir_ / "missing" / "out.jsonl", {}).find("does not exist"), std::string::npos);
  EXPECT_NE(output_error("", {}).find("no output path"), std::string::npos);
  EXPECT_NE(output_error("/dev/null", {}, /*special=*/false).find("must be a regular file"), std::string::npos);
  EXPECT_EQ(check_output_path("/dev/null", "--output", {}), OutputKind::kSpecial);
  EXPECT_EQ(check_output_path(dir_ / "new.jsonl", "--output", {}), OutputKind::kRegular);
}

TEST_F(Files, CommittedOutputIsWholeAndLeavesNoTemporary) {
  write_file_whole(dir_ / "out.txt", "hello\n");
  std::ifstream in(dir_ / "out.txt");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "hello");
  EXPECT_EQ(entries(), (std::vector<std::string>{"out.txt"}));
}

TEST_F(Files, UncommittedOutputLeavesNothing) {
  { OutputFile out(dir_ / "out.txt"); out.write("partial"); }
  EXPECT_EQ(entries(), std::vector<std::string>{});
  file("out.txt", "previous result");
  { OutputFile out(dir_ / "out.txt"); out.write("partial"); }
  std::ifstream in(dir_ / "out.txt");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "previous result");  // the old file is untouched until a whole new one replaces it
}

// A symlink to a regular file stays a link: the file it names is replaced.
TEST_F(Files, SymlinkedOutputReplacesItsTarget) {
  const fs::path target = file("target.txt", "old");
  fs::create_symlink(target, dir_ / "link.txt");
  write_file_whole(dir_ / "link.txt", "new");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.txt"));
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "new");
}

// Special files are written in place, never replaced by a regular file (as root, a rename would replace
// /dev/null itself).
TEST_F(Files, SpecialFileIsWrittenInPlace) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  write_file_whole(fifo, "through the pipe\n");
  char buffer[64] = {};
  const ssize_t n = ::read(reader, buffer, sizeof buffer - 1);
  ::close(reader);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "through the pipe\n");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(entries(), (std::vector<std::string>{"pipe"}));
  write_file_whole("/dev/null", "discarded\n");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(Files, FullDeviceIsAnError) {
  try {
    write_file_whole("/dev/full", std::string(1 << 16, 'x'));
    FAIL() << "a write to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
}

// A file-size limit stands in for a full disk: writes past it fail (EFBIG). Nothing is renamed into place and
// no temporary is left, for the plain writer and for HDF5 (whose buffered data only reaches the file at close).
TEST_F(Files, WriteFailureLeavesNoOutputAndNoTemporary) {
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string plain_error, hdf5_error;
  try {
    OutputFile out(dir_ / "out.jsonl");
    for (int i = 0; i < 100; ++i) out.write(std::string(100, 'x') + "\n");
    out.commit();
  } catch (const Error& e) {
    plain_error = e.what();
  }
  try {
    H5Writer out(dir_ / "out.h5");
    out.write_dataset("logits", Tensor::zeros({64, 64}));
    out.commit();
  } catch (const Error& e) {
    hdf5_error = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &previous, nullptr), 0);
  EXPECT_NE(plain_error.find("File too large"), std::string::npos) << plain_error;
  EXPECT_NE(hdf5_error, "");
  EXPECT_EQ(entries(), std::vector<std::string>{});
}

TEST_F(Files, InputMustBeARegularFile) {
  EXPECT_THROW(read_text_file(dir_, "model config"), InputError);
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  try {
    read_text_file(dir_ / "pipe", "deployment file");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a named pipe, not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_text_file(file("a.txt", "abc"), "x"), "abc");
}

}  // namespace
}  // namespace deepinfer
