// safetensors files damaged at random (header fields set to random values, header bytes flipped, the length
// prefix changed, the file cut): each either opens with every tensor inside the file's data, or is refused
// with a moeserve::Error; no other exception.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <spdlog/spdlog.h>

#include "temp_dir.h"
#include "test_seed.h"

namespace moeserve::io {
namespace {

using nlohmann::json;

std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

json random_field(std::mt19937_64& g) {
  static const std::vector<json> values = {
      nullptr, 0, 1, 2, 3, 4, 8, 16, 17, -1, INT64_MAX, UINT64_MAX, 1.5, "F32", "BF16", "I64", "F8_E4M3", "F4", "",
      json::array(), json::array({2}), json::array({2, 2}), json::array({0, 16}), json::array({16, 0}),
      json::array({0, 4}), json::array({0, 0}), json::array({0, 32}), json::array({-1, 4}), json::array({UINT64_MAX, 8}), json::array({INT64_MAX, 2}),
      json::array({uint64_t(1) << 62, 4}), json::array({uint64_t(1) << 32, uint64_t(1) << 32}),
      json::array({(uint64_t(1) << 61) + 1, 8}), json::object()};
  return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(g)];
}

TEST(SafetensorsRandom, DamagedFilesOpenInBoundsOrAreRefused) {
  moeserve::testing::TempDir dir;
  const std::string path = dir.file("r.safetensors");
  const json good = {{"__metadata__", {{"format", "pt"}}},
                     {"a", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
                     {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {16, 24}}}},
                     {"c", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {24, 32}}}}};
  const std::string data(32, '\x5a');
  static const std::vector<std::string> keys = {"dtype", "shape", "data_offsets"};
  auto g = moeserve::testing::seeded();
  // Hundreds of the damaged files misalign a tensor, and each would log the copy it makes.
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::err);
  int opened = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    json header = good;
    for (int n = std::uniform_int_distribution<int>(0, 2)(g); n > 0; --n) {
      json& t = header[std::string(1, char('a' + g() % 3))];
      if (g() % 8 == 0) t.erase(keys[g() % 3]);
      else t[keys[g() % 3]] = random_field(g);
    }
    std::string bytes = file_bytes(header.dump(), data);
    switch (g() % 6) {  // half the files keep their bytes as written
      case 0: bytes[std::uniform_int_distribution<size_t>(8, bytes.size() - 1)(g)] = char(g()); break;
      case 1: bytes[std::uniform_int_distribution<size_t>(0, 7)(g)] = char(g()); break;
      case 2: bytes.resize(std::uniform_int_distribution<size_t>(0, bytes.size())(g)); break;
      default: break;
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      auto file = SafetensorsFile::open(path);
      uint64_t total = 0;
      volatile uint8_t sink = 0;
      for (const auto& [name, entry] : file->tensors()) {
        // The shape's element count without wrapping: a tensor whose shape wraps to a small count would let a
        // reader that indexes by shape walk past its bytes.
        int64_t numel = 1;
        for (int64_t d : entry.shape) ASSERT_FALSE(__builtin_mul_overflow(numel, d, &numel)) << header.dump();
        ASSERT_EQ(numel, entry.tensor.numel()) << header.dump();
        total += entry.tensor.nbytes();
        const auto* p = static_cast<const uint8_t*>(entry.tensor.raw());
        for (size_t k = 0; k < entry.tensor.nbytes(); ++k) sink = sink ^ p[k];  // every byte mapped
      }
      // Tensors do not overlap and lie after the header: together at most the file's bytes past the prefix.
      EXPECT_LE(total + 8, bytes.size()) << header.dump();
      ++opened;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "escaped as " << typeid(e).name() << ": " << e.what() << "\nheader: " << header.dump();
    }
  }
  spdlog::set_level(level);
  EXPECT_GT(opened, 100);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace moeserve::io
