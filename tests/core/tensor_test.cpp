#include "core/tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/threads.h"

namespace moeserve {
namespace {

TEST(Tensor, ReshapeAndSliceShareStorage) {
  Tensor t = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = t.reshape({3, 2});
  EXPECT_EQ(r.raw(), t.raw());
  Tensor row = t.slice_rows(1, 2);
  EXPECT_EQ(row.dim(0), 1);
  EXPECT_EQ(row.f32()[0], 4.0f);
  EXPECT_THROW(t.reshape({4, 2}), Error);
  EXPECT_THROW(t.slice_rows(1, 3), Error);
}

TEST(Tensor, ToF32ConvertsBf16) {
  Tensor b = Tensor::empty(DType::BF16, {2});
  b.data<uint16_t>()[0] = f32_to_bf16(1.5f);
  b.data<uint16_t>()[1] = f32_to_bf16(-2.25f);
  Tensor f = b.to_f32();
  EXPECT_EQ(f.f32()[0], 1.5f);
  EXPECT_EQ(f.f32()[1], -2.25f);
}

TEST(Tensor, ShapeBytesNeverWraps) {
  EXPECT_EQ(shape_bytes(DType::BF16, {3, 5}), 30);
  EXPECT_EQ(shape_bytes(DType::F32, {}), 4);
  EXPECT_EQ(shape_bytes(DType::F32, {0, int64_t(1) << 62, int64_t(1) << 62}), 0);  // empty
  EXPECT_EQ(shape_bytes(DType::F32, {(int64_t(1) << 61) + 1, 8}), std::nullopt);   // 2^66 + 32 wraps to 32
  EXPECT_EQ(shape_bytes(DType::I8, {int64_t(1) << 32, int64_t(1) << 32}), std::nullopt);
  EXPECT_EQ(shape_bytes(DType::F32, {2, -1}), std::nullopt);
  EXPECT_THROW(Tensor::empty(DType::F32, {int64_t(1) << 62, 4}), Error);  // would allocate a wrapped 0 bytes
}

TEST(Threads, ParallelForCoversEveryIndexOnce) {
  std::vector<int> hits(10007, 0);
  parallel_for(int64_t(hits.size()), 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
  });
  for (int h : hits) ASSERT_EQ(h, 1);
}

TEST(Threads, BackToBackRegionsNeverRunAChunkTwice) {
  // Many short regions in a row: a worker still leaving one region must not take a chunk of the next
  // (that double-ran a chunk and deadlocked the pool before the fix).
  set_worker_count(4);
  for (int region = 0; region < 50000; ++region) {
    // Alternate few and many chunks, and yield inside chunks, so workers straddle region boundaries.
    std::vector<std::atomic<int>> hits(static_cast<size_t>(region % 2 ? 2 : 64));
    for (auto& h : hits) h = 0;
    parallel_for(int64_t(hits.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        hits[size_t(i)]++;
        std::this_thread::yield();
      }
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "region " << region;
  }
}

}  // namespace
}  // namespace moeserve
