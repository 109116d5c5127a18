// safetensors reading: round trip, shards with an index, and a clear error for each kind of damage.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "temp_dir.h"

namespace moeserve::io {
namespace {

using testing::TempDir;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << header << data;
}

TEST(Safetensors, RoundTripsEveryDtype) {
  TempDir dir;
  Tensor a = Tensor::from_f32({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::empty(DType::BF16, {3});
  for (int i = 0; i < 3; ++i) b.data<uint16_t>()[i] = f32_to_bf16(float(i) + 0.5f);
  Tensor c = Tensor::empty(DType::I64, {2});
  c.data<int64_t>()[0] = -7;
  c.data<int64_t>()[1] = 1ll << 40;
  Tensor d = Tensor::empty(DType::F8_E4M3, {4});
  Tensor e = Tensor::empty(DType::F8_E8M0, {1});
  Tensor f = Tensor::empty(DType::I8, {2});
  Tensor g = Tensor::empty(DType::F16, {1});
  for (int i = 0; i < 4; ++i) d.data<uint8_t>()[i] = uint8_t(i * 17);
  e.data<uint8_t>()[0] = 127;
  f.data<int8_t>()[0] = -1;
  f.data<int8_t>()[1] = 0x21;
  g.data<uint16_t>()[0] = f32_to_f16(2.5f);
  save_safetensors(dir.file("m.safetensors"), {{"a", a}, {"b", b}, {"c", c}, {"d", d}, {"e", e}, {"f", f}, {"g", g}},
                   {{"format", "pt"}});
  auto file = SafetensorsFile::open(dir.file("m.safetensors"));
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->tensors().at("a").tensor.f32()[3], 4.0f);
  EXPECT_EQ(file->tensors().at("b").tensor.to_f32().f32()[2], 2.5f);
  EXPECT_EQ(file->tensors().at("c").tensor.data<int64_t>()[1], 1ll << 40);
  EXPECT_EQ(file->tensors().at("d").dtype, DType::F8_E4M3);
  EXPECT_EQ(file->tensors().at("e").tensor.to_f32().f32()[0], 1.0f);
  EXPECT_EQ(file->tensors().at("f").tensor.data<int8_t>()[1], 0x21);
  EXPECT_EQ(file->tensors().at("g").tensor.to_f32().f32()[0], 2.5f);
}

// The format does not align tensors: a 6-byte BF16 tensor puts the next I64 at offset 6, and an odd-length
// header misaligns all of them. Those read back intact (copied); our own files put widest elements first, so
// that their tensors are aligned where they lie.
TEST(Safetensors, MisalignedTensorsAreReadIntact) {
  TempDir dir;
  std::string data;
  for (uint16_t v : {0x3f80, 0x4000, 0x4040}) data += std::string{char(v & 0xff), char(v >> 8)};
  const int64_t big = (int64_t(1) << 40) + 3;
  data += std::string(reinterpret_cast<const char*>(&big), 8);
  for (const std::string pad : {"", " "}) {
    write_raw(dir.file("odd.safetensors"), R"({"b": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},)"
              R"( "i": {"dtype": "I64", "shape": [1], "data_offsets": [6, 14]}})" + pad, data);
    auto file = SafetensorsFile::open(dir.file("odd.safetensors"));
    const Tensor& i = file->tensors().at("i").tensor;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(i.raw()) % 8, 0u);
    EXPECT_EQ(i.data<int64_t>()[0], big);
    EXPECT_EQ(file->tensors().at("b").tensor.to_f32().f32()[2], 3.0f);
  }
  save_safetensors(dir.file("ours.safetensors"), {{"a", Tensor::from_f32({1}, {1})},
                                                  {"b", Tensor::empty(DType::BF16, {3})},
                                                  {"c", Tensor::empty(DType::I64, {2})},
                                                  {"d", Tensor::empty(DType::F8_E4M3, {5})}});
  auto ours = SafetensorsFile::open(dir.file("ours.safetensors"));
  const auto* first = static_cast<const uint8_t*>(ours->tensors().at("c").tensor.raw());  // widest: first
  for (const auto& [name, entry] : ours->tensors()) {
    const auto* p = static_cast<const uint8_t*>(entry.tensor.raw());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % dtype_size(entry.dtype), 0u) << name;
    EXPECT_TRUE(p >= first && p < first + 64) << name << " is a copy, not the file's bytes";
  }
}

TEST(Safetensors, ShardedWithIndex) {
  TempDir dir;
  save_safetensors(dir.file("s1.safetensors"), {{"x", Tensor::from_f32({1}, {1})}});
  save_safetensors(dir.file("s2.safetensors"), {{"y", Tensor::from_f32({1}, {2})}});
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})";
  Checkpoint ckpt = Checkpoint::open_dir(dir.path().string());
  EXPECT_EQ(ckpt.get("y").tensor.f32()[0], 2.0f);
}

TEST(Safetensors, TruncatedFileIsNamed) {
  TempDir dir;
  save_safetensors(dir.file("m.safetensors"), {{"w", Tensor::from_f32({64}, std::vector<float>(64, 1.0f))}});
  std::filesystem::resize_file(dir.file("m.safetensors"), std::filesystem::file_size(dir.file("m.safetensors")) - 10);
  std::string e = error_of([&] { SafetensorsFile::open(dir.file("m.safetensors")); });
  EXPECT_NE(e.find("m.safetensors: tensor 'w' ends at byte 256"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::ofstream(dir.file("tiny.safetensors")) << "abc";
  e = error_of([&] { SafetensorsFile::open(dir.file("tiny.safetensors")); });
  EXPECT_NE(e.find("truncated safetensors file (3 bytes"), std::string::npos) << e;
}

TEST(Safetensors, CorruptHeadersAreNamed) {
  TempDir dir;
  auto check_error = [&](const std::string& header, const std::string& data, const std::string& want) {
    write_raw(dir.file("bad.safetensors"), header, data);
    std::string e = error_of([&] { SafetensorsFile::open(dir.file("bad.safetensors")); });
    EXPECT_NE(e.find(want), std::string::npos) << "header " << header << " gave: " << e;
  };
  check_error("{not json", "", "header is not valid JSON");
  check_error(R"({"w": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", "xx", "unknown dtype 'F4'");
  check_error(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "xxxxxxxx",
              "needs 8 bytes but data_offsets give [0, 4)");
  check_error(R"({"w": {"dtype": "F32", "shape": [2]}})", "xxxxxxxx", "needs dtype, shape and data_offsets");
  check_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                  "v": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})", "xxxxxxxx", "overlap");
  check_error(R"([1, 2])", "", "must be a JSON object");
  // 2^61 + 1 rows of 8 F32 wrap 64 bits to 32 bytes: refused, not read past the data.
  check_error(R"({"w": {"dtype": "F32", "shape": [2305843009213693953, 8], "data_offsets": [0, 32]}})",
              std::string(32, 'x'), "more bytes than 64-bit offsets can hold");
  check_error(R"({"w": {"dtype": "I8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", "",
              "more bytes than 64-bit offsets can hold");
  // A header length pointing past the end of the file.
  std::ofstream out(dir.file("len.safetensors"), std::ios::binary);
  uint64_t n = 1000;
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << "{}";
  out.close();
  std::string e = error_of([&] { SafetensorsFile::open(dir.file("len.safetensors")); });
  EXPECT_NE(e.find("corrupt safetensors header length 1000"), std::string::npos) << e;
}

TEST(Safetensors, BadIndexesAreNamed) {
  TempDir dir;
  save_safetensors(dir.file("s1.safetensors"), {{"x", Tensor::from_f32({1}, {1})}});
  auto check_index = [&](const std::string& text, const std::string& want) {
    std::ofstream(dir.file("model.safetensors.index.json")) << text;
    std::string e = error_of([&] { Checkpoint::open_dir(dir.path().string()); });
    EXPECT_NE(e.find(want), std::string::npos) << text << " gave: " << e;
  };
  check_index("{oops", "model.safetensors.index.json: not valid JSON");
  check_index(R"({"metadata": {}})", "expected an object with a 'weight_map' object");
  check_index(R"({"weight_map": {"x": "missing.safetensors"}})", "shard 'missing.safetensors' listed in the index does not exist");
  check_index(R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})",
              "index lists tensor 'y' in 's1.safetensors' but the shard does not hold it");
  check_index(R"({"weight_map": {"x": "../etc/passwd"}})", "must be a file name inside the directory");
}

}  // namespace
}  // namespace moeserve::io
