#include "src/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/core/check.h"

namespace deepinfer {

// A read-only memory mapping of a whole file; unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    DI_INPUT_CHECK(fd >= 0, "cannot open '{}': {}", path.string(), std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    DI_CHECK(addr_ != MAP_FAILED, "mmap of '{}' failed: {}", path.string(), std::strerror(errno));
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

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(std::make_unique<MappedFile>(path)) {
  const std::string where = path.string();
  DI_INPUT_CHECK(mapping_->size() >= 8, "{}: not a safetensors file (shorter than its header)", where);
  uint64_t header_len = 0;
  std::memcpy(&header_len, mapping_->data(), 8);  // little-endian, as is every supported host
  DI_INPUT_CHECK(header_len <= mapping_->size() - 8, "{}: header length {} exceeds the file", where, header_len);
  data_offset_ = 8 + header_len;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(mapping_->data()) + 8,
                                   reinterpret_cast<const char*>(mapping_->data()) + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed safetensors header: {}", where, e.what()));
  }
  const size_t data_size = mapping_->size() - data_offset_;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      Entry entry;
      entry.dtype = parse_dtype(info.at("dtype").get<std::string>(), where);
      entry.shape = info.at("shape").get<Shape>();
      entry.begin = info.at("data_offsets").at(0).get<size_t>();
      entry.end = info.at("data_offsets").at(1).get<size_t>();
      DI_INPUT_CHECK(entry.begin <= entry.end && entry.end <= data_size &&
                         entry.end - entry.begin == shape_numel(entry.shape) * dtype_size(entry.dtype),
                     "{}: tensor '{}' has inconsistent data offsets", where, name);
      entries_.emplace(name, std::move(entry));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: malformed entry for tensor '{}': {}", where, name, e.what()));
    }
  }
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

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  const auto index_path = dir / "model.safetensors.index.json";
  std::vector<std::string> file_names;
  if (std::filesystem::exists(index_path)) {
    std::ifstream in(index_path);
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
      for (const auto& [name, file] : index.at("weight_map").items()) {
        const std::string file_name = file.get<std::string>();
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
    for (const auto& [name, entry] : files_.back().entries()) file_idx_by_name_[name] = files_.size() - 1;
  }
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
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    DI_INPUT_CHECK(out.good(), "cannot write '{}'", tmp);
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, tensor] : tensors)
      out.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.nbytes()));
    DI_CHECK(out.good(), "writing '{}' failed", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace deepinfer
