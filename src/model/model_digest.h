// What a model computes, named by its files' contents rather than their path: the key of caches that outlive a
// process (generate --kv-store), so that a config edited or weights rewritten at the same path never hit.
#pragma once

#include <filesystem>
#include <string>

namespace deepinfer {

// A hex digest over, for a checkpoint directory: the bytes of config.json, engram_hash.json and
// model.safetensors.index.json (those present), and per *.safetensors shard (by name) its name, size, modification
// time and header (tensor names, dtypes, shapes, offsets), with its tensor bytes whole up to 64 MiB and, past that,
// 64 evenly spaced 4 KiB samples of them (a checkpoint of hundreds of GB is not read for a key). A shard rewritten in
// place changes its modification time, and a differing fine-tune of the same shapes its samples. For a bare
// config file (--load-format dummy): its bytes. InputError naming a file that cannot be read.
std::string model_content_digest(const std::filesystem::path& model_path);

}  // namespace deepinfer
