#include "src/core/hdf5_file.h"

#include "src/core/files.h"

namespace deepinfer {

namespace detail {

std::string hdf5_error_detail() {
  // HDF5 prints its whole stack to stderr by default; the engine reports one message instead, made here from
  // the stack's innermost entries (the system call's errno text is in the sec2 driver's description).
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD,
           [](unsigned n, const H5E_error2_t* entry, void* out) -> herr_t {
             auto& text = *static_cast<std::string*>(out);
             if (n >= 2 || entry->desc == nullptr) return 0;
             std::string desc = entry->desc;
             // The sec2 driver's entry reads "file write failed: time = ..., error message = '<strerror>', ...".
             const size_t quote = desc.find("error message = '");
             if (quote != std::string::npos) {
               const size_t begin = quote + 17, end = desc.find('\'', begin);
               desc = desc.substr(0, desc.find(':')) + ": " + desc.substr(begin, end - begin);
             }
             text += (text.empty() ? "" : "; ") + desc;
             return 0;
           },
           &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail.empty() ? "HDF5 call failed" : "HDF5: " + detail;
}

}  // namespace detail

void silence_hdf5_error_printing() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

H5Writer::H5Writer(std::filesystem::path path)
    : path_(std::filesystem::exists(path) ? std::filesystem::canonical(path)
                                          : std::filesystem::absolute(path).lexically_normal()),
      tmp_path_(temporary_path_for(path_)) {
  silence_hdf5_error_printing();
  const hid_t id = H5Fcreate(tmp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) {
    const std::string reason = detail::hdf5_error_detail();
    std::error_code ignored;
    std::filesystem::remove(tmp_path_, ignored);  // H5Fcreate may leave the empty file it made
    DI_CHECK(false, "cannot create HDF5 file '{}': {}", tmp_path_.string(), reason);
  }
  file_ = H5Id(id, H5Fclose);
}

H5Writer::~H5Writer() {
  if (committed_) return;
  file_.reset();
  std::error_code ignored;
  std::filesystem::remove(tmp_path_, ignored);
}

void H5Writer::write_dataset(const std::string& name, const Tensor& tensor) {
  std::vector<hsize_t> dims(tensor.shape().begin(), tensor.shape().end());
  H5Id space(DI_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
  H5Id dataset(DI_H5_CHECK(H5Dcreate2(file_.get(), name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                      H5P_DEFAULT, H5P_DEFAULT)),
               H5Dclose);
  DI_H5_CHECK(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data<float>()));
  DI_H5_CHECK(dataset.close());  // the data may reach the file only here
}

void H5Writer::set_attribute(const std::string& name, const std::string& value, hid_t object) {
  H5Id type(DI_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  DI_H5_CHECK(H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)));
  DI_H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLPAD));
  H5Id space(DI_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id attr(DI_H5_CHECK(H5Acreate2(object < 0 ? file_.get() : object, name.c_str(), type.get(), space.get(),
                                   H5P_DEFAULT, H5P_DEFAULT)),
            H5Aclose);
  DI_H5_CHECK(H5Awrite(attr.get(), type.get(), value.empty() ? "" : value.data()));
}

void H5Writer::set_attribute(const std::string& name, int64_t value, hid_t object) {
  H5Id space(DI_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Id attr(DI_H5_CHECK(H5Acreate2(object < 0 ? file_.get() : object, name.c_str(), H5T_STD_I64LE, space.get(),
                                   H5P_DEFAULT, H5P_DEFAULT)),
            H5Aclose);
  DI_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value));
}

void H5Writer::commit() {
  DI_CHECK(file_.close() >= 0, "closing HDF5 file '{}' failed (its data could not be written): {}",
           tmp_path_.string(), detail::hdf5_error_detail());
  sync_file(tmp_path_);
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  DI_CHECK(!ec, "renaming '{}' to '{}' failed: {}", tmp_path_.string(), path_.string(), ec.message());
  committed_ = true;
}

}  // namespace deepinfer
