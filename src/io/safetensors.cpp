#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "io/json_file.h"

namespace moeserve::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct Mapping {
  void* data = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (data && data != MAP_FAILED) munmap(data, size);
  }
};

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "{}: cannot open safetensors file: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(errno));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = size_t(st.st_size);
  if (mapping->size < 8) {
    ::close(fd);
    fail("{}: truncated safetensors file ({} bytes; expected at least the 8-byte header length)", path,
         mapping->size);
  }
  mapping->data = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  check(mapping->data != MAP_FAILED, "{}: mmap failed: {}", path, std::strerror(errno));

  const auto* bytes = static_cast<const uint8_t*>(mapping->data);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  check(header_len <= kMaxHeaderBytes && 8 + header_len <= mapping->size,
        "{}: corrupt safetensors header length {} (file has {} bytes)", path, header_len, mapping->size);
  json header;
  try {
    header = json::parse(std::string(reinterpret_cast<const char*>(bytes + 8), header_len));
  } catch (const std::exception& e) {
    fail("{}: safetensors header is not valid JSON: {}", path, e.what());
  }
  check(header.is_object(), "{}: safetensors header must be a JSON object", path);

  auto file = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = mapping->size - data_begin;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t copied_bytes = 0, copied_tensors = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& value = it.value();
    if (name == "__metadata__") {
      check(value.is_object(), "{}: __metadata__ must be an object", path);
      for (auto m = value.begin(); m != value.end(); ++m)
        file->metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      continue;
    }
    check(value.is_object() && value.contains("dtype") && value.contains("shape") && value.contains("data_offsets"),
          "{}: tensor '{}' needs dtype, shape and data_offsets", path, name);
    TensorEntry entry;
    entry.name = name;
    entry.file = path;
    check(value["dtype"].is_string(), "{}: tensor '{}': dtype must be a string", path, name);
    std::string dtype = value["dtype"].get<std::string>();
    check(dtype_from_name(dtype, &entry.dtype),
          "{}: tensor '{}' has unknown dtype '{}' (expected one of F64, F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I32, I64)",
          path, name, dtype);
    check(value["shape"].is_array(), "{}: tensor '{}': shape must be an array", path, name);
    for (const auto& d : value["shape"]) {
      check(d.is_number_integer() && d.get<int64_t>() >= 0, "{}: tensor '{}': bad dimension {}", path, name,
            d.dump());
      entry.shape.push_back(d.get<int64_t>());
    }
    const json& offsets = value["data_offsets"];
    check(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
              offsets[1].is_number_unsigned(),
          "{}: tensor '{}': data_offsets must be two non-negative integers", path, name);
    uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    // Counted without wrapping (the dimensions are non-negative here): a shape whose element count wraps must not
    // pass as a small tensor.
    const std::optional<int64_t> bytes_of_shape = shape_bytes(entry.dtype, entry.shape);
    check(bytes_of_shape.has_value(), "{}: tensor '{}' ({} {}): more bytes than 64-bit offsets can hold", path, name,
          dtype, shape_string(entry.shape));
    const int64_t expected = *bytes_of_shape;
    check(begin <= end && end - begin == uint64_t(expected),
          "{}: tensor '{}' ({} {}) needs {} bytes but data_offsets give [{}, {})", path, name, dtype,
          shape_string(entry.shape), expected, begin, end);
    check(end <= data_size, "{}: tensor '{}' ends at byte {} but the file holds only {} data bytes (truncated?)",
          path, name, end, data_size);
    ranges.emplace_back(begin, end);
    void* data = const_cast<uint8_t*>(bytes + data_begin + begin);
    if (expected == 0 || reinterpret_cast<uintptr_t>(data) % dtype_size(entry.dtype) == 0) {
      entry.tensor = Tensor::borrow(entry.dtype, entry.shape, data, mapping);
    } else {
      // The format does not align tensors (an odd-length header, or a 2-byte tensor before an 8-byte one);
      // reading one in place through a typed pointer would be undefined, so such a tensor is copied.
      entry.tensor = Tensor::empty(entry.dtype, entry.shape);
      std::memcpy(entry.tensor.raw(), data, size_t(expected));
      copied_bytes += uint64_t(expected);
      ++copied_tensors;
    }
    file->tensors_.emplace(name, std::move(entry));
  }
  // Host memory the operator did not plan for (a large checkpoint written without alignment doubles it): said once.
  if (copied_tensors > 0)
    spdlog::warn("{}: {} tensors ({:.1f} MB) are not aligned for their dtype in the file and were copied to memory",
                 path, copied_tensors, double(copied_bytes) / 1e6);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    check(ranges[i].first >= ranges[i - 1].second, "{}: tensor byte ranges overlap at offset {}", path,
          ranges[i].first);
  return file;
}

const TensorEntry& Checkpoint::get(const std::string& name) const {
  auto it = entries_.find(name);
  check(it != entries_.end(), "{}: missing tensor '{}'", source_, name);
  return it->second;
}

Checkpoint Checkpoint::open_files(const std::vector<std::string>& files) {
  Checkpoint ckpt;
  ckpt.source_ = files.empty() ? "(no files)" : files.front();
  for (const auto& path : files) {
    auto file = SafetensorsFile::open(path);
    for (const auto& [name, entry] : file->tensors()) {
      if (ckpt.entries_.count(name))
        fail("{}: tensor '{}' appears in two files ({} and {})", path, name, ckpt.entries_.at(name).file, path);
      ckpt.entries_.emplace(name, entry);
    }
    ckpt.files_.push_back(std::move(file));
  }
  return ckpt;
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  check(fs::is_directory(dir), "{}: not a model directory", dir);
  fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const json index = read_json_file(index_path.string());
    check(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
          "{}: expected an object with a 'weight_map' object", index_path.string());
    std::map<std::string, std::string> wanted;  // tensor -> shard
    std::vector<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      check(it.value().is_string(), "{}: weight_map['{}'] must be a file name", index_path.string(), it.key());
      std::string shard = it.value().get<std::string>();
      check(shard.find('/') == std::string::npos && shard.find("..") == std::string::npos,
            "{}: weight_map['{}'] = '{}' must be a file name inside the directory", index_path.string(), it.key(),
            shard);
      wanted[it.key()] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    std::vector<std::string> paths;
    for (const auto& shard : shards) {
      fs::path p = fs::path(dir) / shard;
      check(fs::exists(p), "{}: shard '{}' listed in the index does not exist", index_path.string(), shard);
      paths.push_back(p.string());
    }
    Checkpoint ckpt = open_files(paths);
    ckpt.source_ = dir;
    for (const auto& [name, shard] : wanted) {
      auto it = ckpt.entries_.find(name);
      check(it != ckpt.entries_.end(), "{}: index lists tensor '{}' in '{}' but the shard does not hold it",
            index_path.string(), name, shard);
      check(fs::path(it->second.file).filename() == shard, "{}: index puts '{}' in '{}' but it is in '{}'",
            index_path.string(), name, shard, fs::path(it->second.file).filename().string());
    }
    return ckpt;
  }
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  check(!paths.empty(), "{}: no *.safetensors files", dir);
  Checkpoint ckpt = open_files(paths);
  ckpt.source_ = dir;
  return ckpt;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Widest elements first (as HF's writer orders them): with the data starting 8-aligned, every tensor then
  // starts at a multiple of its element size and is read in place, without the copy open() makes otherwise.
  std::vector<const std::pair<const std::string, Tensor>*> order;
  for (const auto& item : tensors) order.push_back(&item);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype()) > dtype_size(b->second.dtype());
  });
  uint64_t offset = 0;
  for (const auto* item : order) {
    const Tensor& t = item->second;
    header[item->first] = {{"dtype", std::string(dtype_name(t.dtype()))},
                           {"shape", t.shape()},
                           {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8) text.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  check(bool(out), "{}: cannot write", path);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto* item : order)
    out.write(static_cast<const char*>(item->second.raw()), std::streamsize(item->second.nbytes()));
  check(bool(out), "{}: write failed", path);
}

}  // namespace moeserve::io
