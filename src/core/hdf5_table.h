// An HDF5 table that grows one row at a time: a 1-D extendible dataset of a compound type (int64 and float64
// columns), each append written and flushed, so a run that is killed keeps every row it finished.
// h5py reads it as a structured array: pandas.DataFrame(h5py.File(f)["decode/points"][()]).
#pragma once

#include <string>
#include <vector>

#include "src/core/hdf5_file.h"

namespace deepinfer {

struct H5Column {
  std::string name;
  bool is_int = false;  // int64; otherwise float64
};

class H5Table {
 public:
  // Creates `path` (intermediate groups included) in `file`.
  H5Table(hid_t file, const std::string& path, std::vector<H5Column> columns);
  // One value per column, in column order (int columns are rounded).
  void append(const std::vector<double>& values);
  int64_t num_rows() const { return rows_; }

 private:
  hid_t file_;
  std::vector<H5Column> columns_;
  H5Id type_;
  H5Id dataset_;
  int64_t rows_ = 0;
};

// Opens (creating or truncating) an HDF5 file for incremental writing, and sets root attributes.
class H5IncrementalFile {
 public:
  explicit H5IncrementalFile(const std::string& path);
  hid_t id() const { return file_.get(); }
  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, int64_t value);
  void flush();
  // Closes the file, checking the close, and flushes it to its device: the last step of a complete run.
  void close();

 private:
  std::string path_;
  H5Id file_;
};

}  // namespace deepinfer
