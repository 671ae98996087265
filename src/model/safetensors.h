// The safetensors format (Hugging Face): 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the raw data. Files are memory-mapped and read on demand.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/core/tensor.h"

namespace deepinfer {

class MappedFile;

class SafetensorsFile {
 public:
  struct Entry {
    DType dtype = DType::kF32;
    Shape shape;
    size_t begin = 0;  // byte offsets into the data section
    size_t end = 0;
  };

  // Throws InputError naming the file when it is missing or malformed.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  // A copy of the tensor in its stored dtype.
  Tensor read(const std::string& name) const;
  // Rows [first, first + count) of its first dimension (a part of a table split across ranks).
  Tensor read_rows(const std::string& name, int64_t first, int64_t count) const;

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> mapping_;
  size_t data_offset_ = 0;
  std::map<std::string, Entry> entries_;
};

// A checkpoint directory: model.safetensors, or the shards named by model.safetensors.index.json.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::filesystem::path& dir);

  // nullptr when the checkpoint has no tensor of that name.
  const SafetensorsFile::Entry* find(const std::string& name) const;
  Tensor read(const std::string& name) const;
  Tensor read_rows(const std::string& name, int64_t first, int64_t count) const;
  const std::filesystem::path& dir() const { return dir_; }
  std::vector<std::string> names() const;
  // The file that holds `name` (for error messages).
  std::string file_of(const std::string& name) const;

 private:
  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> file_idx_by_name_;
};

// Writes tensors (f32, bf16, i32, i64, u8) to one safetensors file, atomically (temporary name, then rename).
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace deepinfer
