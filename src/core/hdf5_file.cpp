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

void prepare_hdf5() {
  // Before any other HDF5 call: no clean-up at exit. After an I/O failure (a full disk) HDF5 1.10 keeps a file
  // it could not close in its tables and crashes closing it again at exit; the engine closes what it writes
  // itself, checking each close.
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

H5Writer::H5Writer(std::filesystem::path path) : path_(std::move(path)) {
  prepare_hdf5();
  // In memory (the core driver, no backing store): commit() writes the finished image through OutputFile,
  // so every disk write is checked and a failed one leaves no file, and HDF5 itself never sees an I/O error.
  H5Id fapl(DI_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  DI_H5_CHECK(H5Pset_fapl_core(fapl.get(), size_t{1} << 20, /*backing_store=*/0));
  const hid_t id = H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  DI_CHECK(id >= 0, "cannot create the HDF5 image of '{}': {}", path_.string(), detail::hdf5_error_detail());
  file_ = H5Id(id, H5Fclose);
}

H5Writer::~H5Writer() = default;

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
  DI_CHECK(!committed_, "commit of '{}' twice", path_.string());
  DI_H5_CHECK(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL));
  const ssize_t size = DI_H5_CHECK(H5Fget_file_image(file_.get(), nullptr, 0));
  std::string image(static_cast<size_t>(size), '\0');
  DI_H5_CHECK(H5Fget_file_image(file_.get(), image.data(), image.size()));
  DI_H5_CHECK(file_.close());
  write_file_whole(path_, image);
  committed_ = true;
}

}  // namespace deepinfer
