#include "src/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/core/check.h"

namespace deepinfer {

namespace fs = std::filesystem;

namespace {

std::string describe_kind(const fs::file_status& status) {
  switch (status.type()) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a named pipe";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::not_found: return "missing";
    default: return "not a regular file";
  }
}

// /dev/stdout and /proc/self/fd/N name whatever the process was handed; replacing them by a regular file (or
// renaming onto what they resolve to) would be wrong, so they are written in place even when they resolve to
// a regular file.
bool is_process_stream_path(const fs::path& path) {
  const std::string text = fs::absolute(path).lexically_normal().string();
  return text.starts_with("/dev/") || text.starts_with("/proc/");
}

// Where a regular output finally lands: the file a symlink points to, so the link stays a link.
fs::path resolved_output(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path, ec)) return fs::canonical(path);
  return fs::absolute(path).lexically_normal();
}

std::string errno_text() { return std::strerror(errno); }

// A device, a pipe or a process stream: written in place, never replaced (what OutputFile does and
// check_output_path allows or refuses).
bool writes_in_place(const fs::path& path, const fs::file_status& status) {
  return status.type() != fs::file_type::not_found &&
         (status.type() != fs::file_type::regular || is_process_stream_path(path));
}

// The temporary a regular output is written under until it is whole: "<path>.tmp.<pid>" in the same directory
// (same file system, so the rename is atomic; the pid keeps concurrent writers apart).
fs::path temporary_path_for(const fs::path& path) {
  return fs::path(fmt::format("{}.tmp.{}", path.string(), ::getpid()));
}

// Writes all of `bytes` to `fd` (EINTR and short writes retried); Error naming `path` and the system's reason.
void write_all(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)  // (a full disk is the user's to fix: the path and the reason, no source position)
      throw Error(fmt::format("writing '{}' failed: {}", path.string(), n < 0 ? errno_text() : "no progress"));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

void require_regular_file(const fs::path& path, std::string_view what) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  DI_INPUT_CHECK(status.type() != fs::file_type::not_found, "{} '{}' does not exist", what, path.string());
  DI_INPUT_CHECK(status.type() == fs::file_type::regular, "{} '{}' is {}, not a regular file", what, path.string(),
                 describe_kind(status));
}

namespace {

// A descriptor of `path` opened for reading, -1 when it cannot be opened or is not a regular file (`kind` then
// says what it is). O_NONBLOCK keeps the open from blocking on a pipe nobody writes; it is cleared again, as
// regular files ignore it anyway.
int open_regular(const fs::path& path, std::string* kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *kind = errno_text();
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a named pipe" : "not a regular file";
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Up to `max_bytes` + 1 bytes of `fd` (closed after); false on a read error, with errno kept in `read_errno`.
bool read_all(int fd, size_t max_bytes, std::string& text, int* read_errno) {
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *read_errno = errno;
      ::close(fd);
      return n == 0;
    }
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return true;
    }
  }
}

}  // namespace

std::string read_text_file(const fs::path& path, std::string_view what) {
  require_regular_file(path, what);
  std::string kind;
  const int fd = open_regular(path, &kind);
  DI_INPUT_CHECK(fd >= 0, "cannot open {} '{}': {}", what, path.string(), kind);
  std::string text;
  int read_errno = 0;
  DI_INPUT_CHECK(read_all(fd, std::string().max_size() - 1, text, &read_errno), "cannot read {} '{}': {}", what,
                 path.string(), std::strerror(read_errno));
  return text;
}

std::optional<std::string> read_regular_file_if_any(const fs::path& path, size_t max_bytes) {
  std::string kind;
  const int fd = open_regular(path, &kind);
  if (fd < 0) return std::nullopt;
  std::string bytes;
  int read_errno = 0;
  if (!read_all(fd, max_bytes, bytes, &read_errno) || bytes.size() > max_bytes) return std::nullopt;
  return bytes;
}

std::vector<fs::path> input_files(const fs::path& model_path, std::initializer_list<std::string_view> others) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) {
    files.push_back(model_path);
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(model_path, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with(".json") || name.ends_with(".safetensors")) files.push_back(entry.path());
    }
  }
  for (const std::string_view other : others)
    if (!other.empty()) files.emplace_back(other);
  return files;
}

OutputKind check_output_path(const fs::path& path, std::string_view option,
                             const std::vector<fs::path>& inputs, bool allow_special) {
  DI_INPUT_CHECK(!path.empty(), "{}: no output path given", option);
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  const bool exists = status.type() != fs::file_type::not_found;
  DI_INPUT_CHECK(status.type() != fs::file_type::directory, "{} '{}' is a directory; name a file", option,
                 path.string());
  if (writes_in_place(path, status)) {
    DI_INPUT_CHECK(allow_special, "{} '{}' is {}; this output must be a regular file", option, path.string(),
                   status.type() == fs::file_type::regular ? "a process stream" : describe_kind(status));
    return OutputKind::kSpecial;
  }
  if (exists) {
    for (const fs::path& input : inputs) {
      std::error_code same_ec;
      DI_INPUT_CHECK(!fs::equivalent(path, input, same_ec), "{} '{}' is the same file as the input '{}'; writing it "
                     "would destroy that input", option, path.string(), input.string());
    }
  }
  const fs::path dir = resolved_output(path).parent_path();
  DI_INPUT_CHECK(fs::is_directory(dir, ec), "{} '{}': the directory '{}' does not exist", option, path.string(),
                 dir.string());
  DI_INPUT_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "{} '{}': cannot write in '{}': {}", option,
                 path.string(), dir.string(), errno_text());
  return OutputKind::kRegular;
}

void sync_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DI_CHECK(fd >= 0, "cannot reopen '{}' to flush it: {}", path.string(), errno_text());
  const int rc = ::fsync(fd);
  const int sync_errno = errno;
  const int close_rc = ::close(fd);
  DI_CHECK(rc == 0 && close_rc == 0, "flushing '{}' to its device failed: {}", path.string(),
           std::strerror(rc != 0 ? sync_errno : errno));
}

OutputFile::OutputFile(fs::path path) : path_(std::move(path)) {
  std::error_code ec;
  const fs::file_status status = fs::status(path_, ec);
  in_place_ = writes_in_place(path_, status);
  if (in_place_) {
    writing_path_ = path_;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  } else {
    path_ = resolved_output(path_);
    writing_path_ = temporary_path_for(path_);
    fd_ = ::open(writing_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  }
  DI_INPUT_CHECK(fd_ >= 0, "cannot write '{}': {}", writing_path_.string(), errno_text());
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !in_place_) ::unlink(writing_path_.c_str());
}

void OutputFile::write(std::string_view bytes) {
  DI_CHECK(fd_ >= 0 && !committed_, "write to '{}' after commit", path_.string());
  write_all(fd_, bytes, writing_path_);
}

void OutputFile::commit() {
  DI_CHECK(fd_ >= 0 && !committed_, "commit of '{}' twice", path_.string());
  // A pipe or a device cannot be fsynced (EINVAL); only its close can report a failure.
  DI_CHECK(in_place_ || ::fsync(fd_) == 0, "flushing '{}' to its device failed: {}", writing_path_.string(),
           errno_text());
  const int rc = ::close(fd_);
  fd_ = -1;
  DI_CHECK(rc == 0, "closing '{}' failed: {}", writing_path_.string(), errno_text());
  if (!in_place_)
    DI_CHECK(::rename(writing_path_.c_str(), path_.c_str()) == 0, "renaming '{}' to '{}' failed: {}",
             writing_path_.string(), path_.string(), errno_text());
  committed_ = true;
}

void write_file_whole(const fs::path& path, std::string_view contents) {
  OutputFile out(path);
  out.write(contents);
  out.commit();
}

void append_to_file(const fs::path& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  DI_INPUT_CHECK(fd >= 0, "cannot append to '{}': {}", path.string(), errno_text());
  try {
    write_all(fd, text, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  DI_CHECK(::close(fd) == 0, "closing '{}' failed: {}", path.string(), errno_text());
}

}  // namespace deepinfer
