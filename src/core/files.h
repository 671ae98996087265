// Files in and out, so that bad paths are input errors and no result is ever presented half-written.
//  - Inputs are read only from regular files: a directory, a named pipe or a device is refused by name (a pipe
//    nobody writes would block a rank forever).
//  - Outputs are checked before the work starts (check_output_path, called in a command's prepare()) and
//    written whole or not at all (OutputFile): a regular file through a temporary beside it that commit()
//    flushes, fsyncs and closes, checking each, before the rename; a special file (/dev/null, /dev/stdout, a
//    pipe) in place, never replaced by a regular file.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// InputError naming `what` when `path` does not exist or is not a regular file.
void require_regular_file(const std::filesystem::path& path, std::string_view what);

// The whole file as text (a regular file only).
std::string read_text_file(const std::filesystem::path& path, std::string_view what);

// The contents of `path` when it is a regular file of at most `max_bytes`; nullopt when it is missing, of another
// kind (a named pipe, a device, a directory), larger, or unreadable. Opened with O_NONBLOCK, so that a pipe never
// blocks the open, and checked by fstat on the open descriptor (no race with a rename): for caches, whose bad
// entries are misses rather than errors.
std::optional<std::string> read_regular_file_if_any(const std::filesystem::path& path, size_t max_bytes);

// Every regular file a command reads: those of the model path (the config file, or a checkpoint directory's
// .json and .safetensors files) and the `others` that are not empty. For check_output_path's list of inputs.
std::vector<std::filesystem::path> input_files(const std::filesystem::path& model_path,
                                               std::initializer_list<std::string_view> others = {});

enum class OutputKind {
  kRegular,  // a regular file (new or replaced) through a temporary and a rename
  kSpecial,  // a device or a pipe, written in place
};

// InputError naming `option` when `path` cannot take a command's output: empty, a directory, in a directory
// that does not exist or cannot be written, or the same file as one of `inputs` (which it would destroy).
// `allow_special` says whether a device or a pipe may take it (a JSON lines stream may; HDF5 needs a file).
OutputKind check_output_path(const std::filesystem::path& path, std::string_view option,
                             const std::vector<std::filesystem::path>& inputs, bool allow_special = true);

// One output file, written whole or not at all. Every failed write, flush, fsync or close is an Error naming
// the file and the system's reason (a full disk: "No space left on device"); without commit() the temporary is
// removed, so a failed run leaves neither a partial result nor a stray .tmp.
class OutputFile {
 public:
  explicit OutputFile(std::filesystem::path path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::string_view bytes);
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path writing_path_;  // until commit(): the temporary beside path_, or the special file itself
  int fd_ = -1;
  bool in_place_ = false;
  bool committed_ = false;
};

// Flushes a closed file's data to its device (fsync), so that a delayed write error (a full disk on a file
// system that allocates late) is seen before the file is renamed into place. Error on failure.
void sync_file(const std::filesystem::path& path);

// Writes `contents` to `path` through OutputFile.
void write_file_whole(const std::filesystem::path& path, std::string_view contents);

// Appends `text` to `path` (created when missing), every write and the close checked: for the JSON lines a
// benchmark adds one point at a time.
void append_to_file(const std::filesystem::path& path, std::string_view text);

}  // namespace deepinfer
