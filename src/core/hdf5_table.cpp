#include "src/core/hdf5_table.h"

#include <cmath>
#include <cstring>

#include "src/core/files.h"

namespace deepinfer {

namespace {

// Creates the groups on the way to `path` ("a/b/c" -> "/a", "/a/b").
void make_parents(hid_t file, const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    const std::string group = path.substr(0, pos);
    if (H5Lexists(file, group.c_str(), H5P_DEFAULT) > 0) continue;
    H5Id created(DI_H5_CHECK(H5Gcreate2(file, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
  }
}

void write_attribute(hid_t object, const std::string& name, hid_t type, const void* value) {
  if (H5Aexists(object, name.c_str()) > 0) DI_H5_CHECK(H5Adelete(object, name.c_str()));
  H5Id space(DI_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id attr(DI_H5_CHECK(H5Acreate2(object, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  DI_H5_CHECK(H5Awrite(attr.get(), type, value));
}

}  // namespace

H5Table::H5Table(hid_t file, const std::string& path, std::vector<H5Column> columns)
    : file_(file), columns_(std::move(columns)) {
  const std::string full = path.starts_with("/") ? path : "/" + path;
  make_parents(file, full);
  type_ = H5Id(DI_H5_CHECK(H5Tcreate(H5T_COMPOUND, columns_.size() * 8)), H5Tclose);
  for (size_t i = 0; i < columns_.size(); ++i)
    DI_H5_CHECK(H5Tinsert(type_.get(), columns_[i].name.c_str(), i * 8,
                          columns_[i].is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE));
  const hsize_t dims[1] = {0}, max_dims[1] = {H5S_UNLIMITED}, chunk[1] = {16};
  H5Id space(DI_H5_CHECK(H5Screate_simple(1, dims, max_dims)), H5Sclose);
  H5Id props(DI_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  DI_H5_CHECK(H5Pset_chunk(props.get(), 1, chunk));
  dataset_ = H5Id(DI_H5_CHECK(H5Dcreate2(file, full.c_str(), type_.get(), space.get(), H5P_DEFAULT, props.get(),
                                         H5P_DEFAULT)),
                  H5Dclose);
}

void H5Table::append(const std::vector<double>& values) {
  DI_CHECK(values.size() == columns_.size(), "row of {} values for {} columns", values.size(), columns_.size());
  std::vector<char> row(columns_.size() * 8);
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].is_int) {
      const auto v = static_cast<int64_t>(std::llround(values[i]));
      std::memcpy(row.data() + i * 8, &v, 8);
    } else {
      std::memcpy(row.data() + i * 8, &values[i], 8);
    }
  }
  const hsize_t new_size[1] = {static_cast<hsize_t>(rows_ + 1)};
  DI_H5_CHECK(H5Dset_extent(dataset_.get(), new_size));
  H5Id file_space(DI_H5_CHECK(H5Dget_space(dataset_.get())), H5Sclose);
  const hsize_t start[1] = {static_cast<hsize_t>(rows_)}, count[1] = {1};
  DI_H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
  H5Id mem_space(DI_H5_CHECK(H5Screate_simple(1, count, nullptr)), H5Sclose);
  DI_H5_CHECK(H5Dwrite(dataset_.get(), type_.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, row.data()));
  ++rows_;
  DI_H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL));
}

H5IncrementalFile::H5IncrementalFile(const std::string& path) : path_(path) {
  prepare_hdf5();
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  DI_CHECK(id >= 0, "cannot create HDF5 file '{}': {}", path, detail::hdf5_error_detail());
  file_ = H5Id(id, H5Fclose);
}

void H5IncrementalFile::set_attribute(const std::string& name, const std::string& value) {
  H5Id type(DI_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  DI_H5_CHECK(H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)));
  DI_H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLPAD));
  write_attribute(file_.get(), name, type.get(), value.empty() ? "" : value.data());
}

void H5IncrementalFile::set_attribute(const std::string& name, int64_t value) {
  write_attribute(file_.get(), name, H5T_NATIVE_INT64, &value);
}

void H5IncrementalFile::flush() { DI_H5_CHECK(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL)); }

void H5IncrementalFile::close() {
  // Flushed first: the tables' datasets may still be open, and with them HDF5 closes the file only later.
  flush();
  DI_CHECK(file_.close() >= 0, "closing HDF5 file '{}' failed (its data could not be written): {}", path_,
           detail::hdf5_error_detail());
  sync_file(path_);
}

}  // namespace deepinfer
