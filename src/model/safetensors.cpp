#include "src/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/json_depth.h"

namespace deepinfer {

// A read-only memory mapping of a whole file; unmapped on destruction.
class MappedFile {
 public:
  // Only a regular file: a directory fails mmap, and a named pipe or a device would block or never end.
  // O_NONBLOCK keeps the open itself from blocking on a pipe nobody writes.
  explicit MappedFile(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    DI_INPUT_CHECK(fd >= 0, "cannot open '{}': {}", path.string(), std::strerror(errno));
    struct stat st {};
    const int stat_rc = ::fstat(fd, &st);
    if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      DI_INPUT_CHECK(stat_rc == 0, "cannot stat '{}': {}", path.string(), std::strerror(errno));
      throw InputError(fmt::format("'{}' is not a regular file ({}): a checkpoint shard must be one", path.string(),
                                   S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a named pipe"
                                                                                            : "a special file"));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    DI_CHECK(addr_ != MAP_FAILED, "mmap of '{}' failed: {}", path.string(), std::strerror(mmap_errno));
  }
  ~MappedFile() {
    if (addr_ != nullptr && addr_ != MAP_FAILED) ::munmap(addr_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return static_cast<const std::byte*>(addr_); }
  size_t size() const { return size_; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

namespace {

DType parse_dtype(const std::string& name, const std::string& where) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  // Raw bytes: packed FP4 pairs (DeepSeek-V4.x experts ship them as I8) and UE8M0 scales (F8_E8M0).
  if (name == "U8" || name == "I8" || name == "F8_E8M0") return DType::kU8;
  throw InputError(fmt::format("{}: unsupported safetensors dtype '{}'", where, name));
}

std::string safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "?";
}

}  // namespace

// Validated as the format requires, so that a damaged file is refused rather than read off by some bytes: the
// header length within the file (and within the format's 100 MB), every entry's dtype x shape equal to its byte
// range, and the ranges, sorted, tiling the data section exactly: starting at 0, each beginning where the
// previous ends (no gap, no overlap), the last ending at the end of the file.
SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(std::make_unique<MappedFile>(path)) {
  const std::string where = path.string();
  DI_INPUT_CHECK(mapping_->size() >= 8, "{}: not a safetensors file (shorter than its header)", where);
  uint64_t header_len = 0;
  std::memcpy(&header_len, mapping_->data(), 8);  // little-endian, as is every supported host
  constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit
  DI_INPUT_CHECK(header_len <= mapping_->size() - 8 && header_len <= kMaxHeaderBytes,
                 "{}: header length {} exceeds the file ({} bytes) or the format's 100 MB", where, header_len,
                 mapping_->size());
  data_offset_ = 8 + header_len;
  nlohmann::json header;
  check_json_file_depth(std::string_view(reinterpret_cast<const char*>(mapping_->data()) + 8, header_len), where);
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(mapping_->data()) + 8,
                                   reinterpret_cast<const char*>(mapping_->data()) + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed safetensors header: {}", where, e.what()));
  }
  DI_INPUT_CHECK(header.is_object(), "{}: the safetensors header is not a JSON object", where);
  const size_t data_size = mapping_->size() - data_offset_;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      Entry entry;
      entry.dtype = parse_dtype(info.at("dtype").get<std::string>(), fmt::format("{}: tensor '{}'", where, name));
      const nlohmann::json& shape = info.at("shape");
      const nlohmann::json& offsets = info.at("data_offsets");
      DI_INPUT_CHECK(shape.is_array() && offsets.is_array() && offsets.size() == 2 &&
                         offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
                     "{}: tensor '{}' needs a 'shape' array and two unsigned 'data_offsets'", where, name);
      uint64_t bytes = dtype_size(entry.dtype);
      for (const nlohmann::json& dim : shape) {
        DI_INPUT_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() <= data_size,
                       "{}: tensor '{}' has a bad dimension {}", where, name, dim.dump());
        const uint64_t d = dim.get<uint64_t>();
        DI_INPUT_CHECK(d == 0 || bytes <= data_size / d, "{}: tensor '{}' of shape {} is larger than the file", where,
                       name, shape.dump());
        bytes *= d;
        entry.shape.push_back(static_cast<int64_t>(d));
      }
      entry.begin = offsets[0].get<uint64_t>();
      entry.end = offsets[1].get<uint64_t>();
      DI_INPUT_CHECK(entry.begin <= entry.end && entry.end <= data_size,
                     "{}: tensor '{}' has data offsets [{}, {}] outside the data section of {} bytes", where, name,
                     entry.begin, entry.end, data_size);
      DI_INPUT_CHECK(entry.end - entry.begin == bytes,
                     "{}: tensor '{}' ({} of shape {}) needs {} bytes, its data offsets [{}, {}] hold {}", where, name,
                     info.at("dtype").get<std::string>(), shape.dump(), bytes, entry.begin, entry.end,
                     entry.end - entry.begin);
      entries_.emplace(name, std::move(entry));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: malformed entry for tensor '{}': {}", where, name, e.what()));
    }
  }
  std::vector<std::pair<size_t, const std::string*>> ranges;  // (begin, name), by begin then end
  for (const auto& [name, entry] : entries_) ranges.emplace_back(entry.begin, &name);
  std::sort(ranges.begin(), ranges.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : entries_.at(*a.second).end < entries_.at(*b.second).end;
  });
  size_t expected_begin = 0;
  const std::string* previous = nullptr;
  for (const auto& [begin, name] : ranges) {
    DI_INPUT_CHECK(begin == expected_begin,
                   "{}: tensor '{}' begins at byte {} of the data, {} (tensors must tile the data: no gap, no overlap)",
                   where, *name, begin,
                   previous == nullptr ? std::string("expected 0")
                                       : fmt::format("where '{}' ends at {}", *previous, expected_begin));
    expected_begin = entries_.at(*name).end;
    previous = name;
  }
  DI_INPUT_CHECK(expected_begin == data_size,
                 "{}: the tensors' data ends at byte {} of the data section but the file holds {} bytes after the "
                 "header (a wrong header length, or trailing bytes)", where, expected_begin, data_size);
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

Tensor SafetensorsFile::read(const std::string& name) const {
  auto it = entries_.find(name);
  DI_CHECK(it != entries_.end(), "tensor '{}' not in {}", name, path_.string());
  Tensor tensor = Tensor::zeros(it->second.shape, it->second.dtype);
  std::memcpy(tensor.raw_data(), mapping_->data() + data_offset_ + it->second.begin, tensor.nbytes());
  return tensor;
}

Tensor SafetensorsFile::read_rows(const std::string& name, int64_t first, int64_t count) const {
  auto it = entries_.find(name);
  DI_CHECK(it != entries_.end(), "tensor '{}' not in {}", name, path_.string());
  Shape shape = it->second.shape;
  DI_CHECK(!shape.empty() && first >= 0 && count >= 0 && first + count <= shape[0],
           "rows [{}, {}) of tensor '{}' {} in {}", first, first + count, name, shape_str(shape), path_.string());
  shape[0] = count;
  Tensor tensor = Tensor::zeros(shape, it->second.dtype);
  const size_t row_bytes = count > 0 ? tensor.nbytes() / static_cast<size_t>(count) : 0;
  std::memcpy(tensor.raw_data(), mapping_->data() + data_offset_ + it->second.begin + first * row_bytes,
              tensor.nbytes());
  return tensor;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  const auto index_path = dir / "model.safetensors.index.json";
  std::vector<std::string> file_names;
  std::map<std::string, std::string> file_by_name;  // the index's weight_map
  if (std::filesystem::exists(index_path)) {
    const std::string text = read_text_file(index_path, "the checkpoint index");
    check_json_file_depth(text, index_path.string());
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(text);
      for (const auto& [name, file] : index.at("weight_map").items()) {
        const std::string file_name = file.get<std::string>();
        // A shard is a file of this directory: a path elsewhere is a damaged (or hostile) index.
        DI_INPUT_CHECK(!file_name.empty() && std::filesystem::path(file_name).filename() == file_name &&
                           file_name != "." && file_name != "..",
                       "{}: weight_map puts '{}' in '{}', which is not a file of the checkpoint's directory",
                       index_path.string(), name, file_name);
        file_by_name[name] = file_name;
        if (std::find(file_names.begin(), file_names.end(), file_name) == file_names.end())
          file_names.push_back(file_name);
      }
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: malformed index: {}", index_path.string(), e.what()));
    }
  } else {
    DI_INPUT_CHECK(std::filesystem::exists(dir / "model.safetensors"),
                   "{}: no model.safetensors and no model.safetensors.index.json", dir.string());
    file_names.push_back("model.safetensors");
  }
  for (const std::string& file_name : file_names) {
    files_.emplace_back(dir / file_name);
    for (const auto& [name, entry] : files_.back().entries()) {
      // With an index, a tensor is read from the shard it names (as transformers does), whatever else holds it.
      const auto indexed = file_by_name.find(name);
      if (indexed == file_by_name.end() || indexed->second == file_name) file_idx_by_name_[name] = files_.size() - 1;
    }
  }
  for (const auto& [name, file_name] : file_by_name)
    DI_INPUT_CHECK(file_idx_by_name_.contains(name) && files_[file_idx_by_name_.at(name)].path().filename() == file_name,
                   "{}: weight_map puts '{}' in '{}', which does not hold it", index_path.string(), name, file_name);
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, idx] : file_idx_by_name_) out.push_back(name);
  return out;
}

const SafetensorsFile::Entry* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = file_idx_by_name_.find(name);
  if (it == file_idx_by_name_.end()) return nullptr;
  return &files_[it->second].entries().at(name);
}

Tensor SafetensorsCheckpoint::read(const std::string& name) const {
  auto it = file_idx_by_name_.find(name);
  DI_CHECK(it != file_idx_by_name_.end(), "tensor '{}' not in checkpoint {}", name, dir_.string());
  return files_[it->second].read(name);
}

Tensor SafetensorsCheckpoint::read_rows(const std::string& name, int64_t first, int64_t count) const {
  auto it = file_idx_by_name_.find(name);
  DI_CHECK(it != file_idx_by_name_.end(), "tensor '{}' not in checkpoint {}", name, dir_.string());
  return files_[it->second].read_rows(name, first, count);
}

std::string SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = file_idx_by_name_.find(name);
  return it == file_idx_by_name_.end() ? dir_.string() : files_[it->second].path().string();
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  OutputFile out(path);
  const uint64_t len = text.size();
  out.write(std::string_view(reinterpret_cast<const char*>(&len), 8));
  out.write(text);
  for (const auto& [name, tensor] : tensors)
    out.write(std::string_view(static_cast<const char*>(tensor.raw_data()), tensor.nbytes()));
  out.commit();
}

}  // namespace deepinfer
