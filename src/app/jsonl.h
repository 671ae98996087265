// The generate command's files: requests in, results out, one JSON object per line.
#pragma once

#include <filesystem>
#include <vector>

#include "src/engine/request.h"

namespace deepinfer::app {

// Throws InputError naming the file and line number of a malformed line or a bad field.
std::vector<Request> read_requests(const std::filesystem::path& path);

// Writes the results in order, whole or not at all (temporary file, then rename).
void write_results(const std::filesystem::path& path, const std::vector<RequestResult>& results);

}  // namespace deepinfer::app
