// HDF5 output through the C API, with every handle owned (RAII) and every file written whole or not at all:
// H5Writer builds the file in memory and commit() writes the image through OutputFile (a temporary beside the
// path, every write, the fsync and the close checked, then the rename).
#pragma once

#include <hdf5.h>

#include <filesystem>
#include <string>
#include <utility>

#include "src/core/tensor.h"

namespace deepinfer {

// Owns one HDF5 identifier; closes it with the matching H5*close.
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Id(H5Id&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  H5Id& operator=(H5Id&& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(closer_, other.closer_);
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }

  hid_t get() const { return id_; }
  // Closes now and reports the close's result (negative on failure: HDF5 flushes its caches here).
  herr_t close() {
    const herr_t rc = id_ >= 0 && closer_ != nullptr ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return rc;
  }
  void reset() { (void)close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Called before the first HDF5 call of a writer: turns off HDF5's printing of its error stack (every failure is
// reported once, through DI_H5_CHECK's message) and its exit-time clean-up (see hdf5_file.cpp).
void prepare_hdf5();

class H5Writer {
 public:
  explicit H5Writer(std::filesystem::path path);
  ~H5Writer();  // without commit(), nothing is written

  hid_t file() const { return file_.get(); }
  // A float32 dataset holding the tensor (which must be f32).
  void write_dataset(const std::string& name, const Tensor& tensor);
  void set_attribute(const std::string& name, const std::string& value, hid_t object = -1);
  void set_attribute(const std::string& name, int64_t value, hid_t object = -1);
  void commit();

 private:
  std::filesystem::path path_;
  H5Id file_;
  bool committed_ = false;
};

}  // namespace deepinfer
