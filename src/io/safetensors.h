#pragma once
// safetensors over mmap: 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
// A checkpoint is one file or several shards listed by model.safetensors.index.json.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace moeserve::io {

struct TensorEntry {
  std::string name;
  std::string file;  // path of the shard holding it
  DType dtype;
  Shape shape;
  Tensor tensor;  // borrowed view into the mapping
};

class SafetensorsFile {
 public:
  // Validates the header completely (dtypes, shapes vs byte ranges, overlaps, bounds); throws Error naming the file.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::shared_ptr<void> mapping_;
  std::map<std::string, TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory: `model.safetensors.index.json` if present, else every *.safetensors file.
class Checkpoint {
 public:
  static Checkpoint open_dir(const std::string& dir);
  static Checkpoint open_files(const std::vector<std::string>& files);

  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  const TensorEntry& get(const std::string& name) const;
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorEntry> entries_;
};

// Writes tensors (in name order) as one safetensors file; metadata goes in "__metadata__".
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace moeserve::io
