// Codecs against PyTorch's own conversions (fixture bytes made by tools/make_dtype_goldens.py on the GPU machine).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors.h"
#include "test_paths.h"

namespace moeserve {
namespace {

io::Checkpoint goldens() { return io::Checkpoint::open_files({testing::fixture("dtypes/dtype_goldens.safetensors")}); }

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_to_bits(a) == f32_to_bits(b); }

TEST(DType, E4M3DecodeMatchesPyTorchForEveryCode) {
  auto g = goldens();
  const float* dec = g.get("e4m3_dec").tensor.f32();
  for (int code = 0; code < 256; ++code)
    EXPECT_TRUE(same_float(fp8_e4m3_to_f32(uint8_t(code)), dec[code])) << "code " << code;
}

TEST(DType, E4M3EncodeMatchesPyTorchBitExact) {
  auto g = goldens();
  const auto& in = g.get("e4m3_in").tensor;
  const uint8_t* out = g.get("e4m3_out").tensor.data<uint8_t>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < in.numel(); ++i) {
    float x = in.f32()[i];
    uint8_t got = f32_to_fp8_e4m3(x), want = out[i];
    // NaN has two encodings (0x7f / 0xff); compare as NaN-ness there.
    bool ok = got == want || (std::isnan(fp8_e4m3_to_f32(got)) && std::isnan(fp8_e4m3_to_f32(want)));
    if (!ok && mismatches++ < 10) ADD_FAILURE() << "x=" << x << " got 0x" << std::hex << int(got) << " want 0x" << int(want);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(DType, E8M0DecodeMatchesPyTorchForEveryByte) {
  auto g = goldens();
  const float* dec = g.get("e8m0_dec").tensor.f32();
  for (int code = 0; code < 256; ++code)
    EXPECT_TRUE(same_float(e8m0_to_f32(uint8_t(code)), dec[code])) << "code " << code;
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f, 0.1f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v == 0.1f ? 0.0999755859375f : v) << v;
}

TEST(DType, E2M1GridAndTies) {
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t code = 0; code < 16; ++code)
    EXPECT_EQ(fp4_e2m1_to_f32(code), (code & 8 ? -1.0f : 1.0f) * grid[code & 7]);
  EXPECT_EQ(round_to_fp4_e2m1(0.25f), 0.0f);   // tie between 0 and 0.5 -> even code 0
  EXPECT_EQ(round_to_fp4_e2m1(0.75f), 1.0f);   // tie between 0.5 (code 1) and 1.0 (code 2) -> even
  EXPECT_EQ(round_to_fp4_e2m1(1.25f), 1.0f);   // tie 1.0 (2) / 1.5 (3) -> 2
  EXPECT_EQ(round_to_fp4_e2m1(2.5f), 2.0f);    // tie 2 (4) / 3 (5) -> 4
  EXPECT_EQ(round_to_fp4_e2m1(3.5f), 4.0f);    // tie 3 (5) / 4 (6) -> 6
  EXPECT_EQ(round_to_fp4_e2m1(5.0f), 4.0f);    // tie 4 (6) / 6 (7) -> 6
  EXPECT_EQ(round_to_fp4_e2m1(100.0f), 6.0f);  // saturate
  EXPECT_EQ(round_to_fp4_e2m1(-1.6f), -1.5f);
}

}  // namespace
}  // namespace moeserve
