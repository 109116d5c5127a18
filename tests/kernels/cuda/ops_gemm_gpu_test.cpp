// GEMMs on the GPU against a double-precision reference on the same operands.
// Skinny GEMM (fp32 activations, BF16 or FP8 weights, fp32 accumulation): every element within
// 64 * 2^-24 * sum_k |x_k w_k| — the worst-case rounding of fp32 sums over the kernel's chain (at most
// K / (KT * VEC) sequential chunk additions of VEC products, then a log2(KT)-deep tree; < 64 terms deep for
// every shape here). cuBLASLt BF16: activations rounded to bf16 first (the reference uses the same rounded
// values); any summation order of K fp32 additions with truncation: 2K * 2^-24 * sum|xw|. cuBLASLt FP8 with
// 1x128 / 128x128 block scales: Hopper's FP8 tensor cores keep ~14 bits inside each 128-k block before the
// fp32 promotion (DeepSeek-V3 report 3.3.2), so 2^-10 * sum|xw|.
#include <cmath>
#include <cstdlib>
#include <functional>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/fp8_test_weights.h"
#include "kernels/cuda/gemv_small.h"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/ops.h"

namespace moeserve {
namespace {

using namespace gputest;
namespace ref = kernels::cpu;

// Reference y[m][n] = sum_k x[m][k] w[n][k] in double, and the tolerance from sum |x w|.
void reference(const float* x, int ldx, const float* w, int K, int m, int n, double* y, double* abs_sum) {
  double s = 0, a = 0;
  for (int k = 0; k < K; ++k) {
    const double p = double(x[size_t(m) * ldx + k]) * double(w[size_t(n) * K + k]);
    s += p;
    a += std::fabs(p);
  }
  *y = s;
  *abs_sum = a;
}

constexpr float kSkinnyTol = 64.0f / 16777216.0f;

// Expected rows [M][w.N] of x [M][ldx] times the dequantized weights (the double reference), each with the
// tolerance rel x sum |products| + floor.
void expected_rows(const std::vector<float>& x, int ldx, const Weights& w, int M, double rel, double floor,
                   std::vector<float>* want, std::vector<float>* tol) {
  want->assign(size_t(M) * w.N, 0.0f);
  tol->assign(want->size(), 0.0f);
  parallel_for(w.N, 16, [&](int64_t b, int64_t e) {
    for (int m = 0; m < M; ++m)
      for (int64_t n = b; n < e; ++n) {
        double r, as;
        reference(x.data(), ldx, w.deq.data(), w.K, m, int(n), &r, &as);
        (*want)[size_t(m) * w.N + n] = float(r);
        (*tol)[size_t(m) * w.N + n] = float(rel * as + floor);
      }
  });
}

// The skinny GEMM's expected rows and tolerances.
void skinny_expected(const std::vector<float>& x, int ldx, const Weights& w, int M, std::vector<float>* want,
                     std::vector<float>* tol) {
  expected_rows(x, ldx, w, M, kSkinnyTol, 1e-30, want, tol);
}

// Args of a 4-row BF16 problem of width K and M rows, no buffers: for the refusal checks.
cuda::GemvArgs tiny_bf16_args(int K, int M) {
  cuda::GemvArgs a;
  a.wtype = cuda::WeightType::BF16;
  a.N = 4;
  a.K = K;
  a.M = M;
  a.ldx = K;
  return a;
}

// Args of an N x K problem of M rows whose every pointer is `dummy` (16-byte aligned, never read): for the one-row
// kernels' refusal and rows-per-block checks.
cuda::GemvArgs shape_args(const float* dummy, bool fp8, int N, int K, int M) {
  cuda::GemvArgs a = tiny_bf16_args(K, M);
  a.wtype = fp8 ? cuda::WeightType::FP8 : cuda::WeightType::BF16;
  a.N = N;
  a.w = a.x = a.row_scale = dummy;
  a.y = const_cast<float*>(dummy);
  a.scale_ld = (K + 127) / 128;
  return a;
}

TEST(CudaGemm, SkinnyGemmDenseBf16AndFp8) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int N, K; const char* name; };
  // V4-Flash: wq_a, wq_b, wkv, wo_b, shared w13, w2, indexer wq_b, head slice; V4-Pro: wq_a, wo_b; tiny.
  for (Shape s : {Shape{1024, 4096, "flash wq_a"}, Shape{32768, 1024, "flash wq_b"}, Shape{512, 4096, "flash wkv"},
                  Shape{4096, 8192, "flash wo_b"}, Shape{4096, 4096, "flash w13"}, Shape{4096, 2048, "flash w2"},
                  Shape{8192, 1024, "flash indexer wq_b"}, Shape{1536, 7168, "pro wq_a"}, Shape{7168, 16384, "pro wo_b"},
                  Shape{64, 32, "tiny"}, Shape{100, 96, "odd"}}) {
    for (bool fp8 : {false, true}) {
      Weights w = make_weights(fp8, s.N, s.K, 1, g);
      const DeviceWeights dw(w);
      for (int M : {1, 3, 8, 13}) {
        if (size_t(M) * s.N * s.K > (size_t(1) << 29)) continue;  // keep the double reference quick
        auto x = normal(size_t(M) * s.K, g);
        auto dx = dev(x);
        std::vector<float> want, tol;
        skinny_expected(x, s.K, w, M, &want, &tol);
        for (bool blk : {false, true}) {  // FP8 scales as a copy per row, then as the 128 x 128 grid
          if (blk && !fp8) continue;
          auto y = poisoned<float>(size_t(M) * s.N);
          const cuda::GemvArgs a = dw.args(w, dx.data(), s.K, y.data(), s.N, M, blk);
          MOESERVE_CUDA_CHECK(cuda::gemv(a, nullptr));
          expect_close(host(y), want, tol,
                       std::string("gemv ") + (fp8 ? "fp8 " : "bf16 ") + (blk ? "block scales " : "") + s.name +
                           " M=" + std::to_string(M));
        }
      }
    }
  }
}

// act_fp8: the FP8 activation simulation applied on the skinny GEMM's loads (one row per pass). Checked against the CPU reference's
// fp8_block_sim of x followed by the double-precision product (the skinny tolerance), and bit for bit against
// the same kernel fed the separately simulated x. Blocks of x span many magnitudes (one all-zero block, one
// below the amax floor) so that the per-block scales differ.
TEST(CudaGemm, SkinnyGemmFusedFp8ActivationSimulation) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int N, K; const char* name; };
  for (Shape s : {Shape{1024, 4096, "flash wq_a"}, Shape{32768, 1024, "flash wq_b"}, Shape{4096, 2048, "flash w2"},
                  Shape{4096, 8192, "flash wo_b"}, Shape{200, 384, "odd rows"}}) {
    for (bool fp8 : {false, true}) {
      Weights w = make_weights(fp8, s.N, s.K, 1, g);
      const DeviceWeights dw(w);
      for (int M : {1}) {
        const int ldx = s.K + 128;  // a strided input, as the attention's x rows
        auto x = normal(size_t(M) * ldx, g);
        std::uniform_real_distribution<float> mag(-12.0f, 6.0f);
        for (int m = 0; m < M; ++m)
          for (int b = 0; b < s.K / 128; ++b) {
            const float f = b == 1 ? 0.0f : b == 2 ? 1e-7f : std::exp2(mag(g));
            for (int k = 0; k < 128; ++k) x[size_t(m) * ldx + b * 128 + k] *= f;
          }
        auto dx = dev(x);
        std::vector<float> xs = x;
        ref::fp8_block_sim(xs.data(), M, ldx, s.K, 128);
        auto dxs = dev(xs);
        auto y = poisoned<float>(size_t(M) * s.N);
        auto y_sep = poisoned<float>(size_t(M) * s.N);
        cuda::GemvArgs a = dw.args(w, dx.data(), ldx, y.data(), s.N, M);
        ASSERT_TRUE(cuda::gemv_fuses_act_fp8(a));
        a.act_fp8 = true;
        MOESERVE_CUDA_CHECK(cuda::gemv(a, nullptr));
        cuda::GemvArgs sep = a;
        sep.act_fp8 = false;
        sep.x = dxs.data();
        sep.y = y_sep.data();
        MOESERVE_CUDA_CHECK(cuda::gemv(sep, nullptr));
        std::vector<float> want, tol;
        skinny_expected(xs, ldx, w, M, &want, &tol);
        const std::string what = std::string("gemv act_fp8 ") + (fp8 ? "fp8 " : "bf16 ") + s.name + " M=" + std::to_string(M);
        const std::vector<float> got = host(y), got_sep = host(y_sep);
        expect_close(got, want, tol, what);
        expect_same_bits(got, got_sep, what + ": fused against separate simulation");
      }
    }
  }
  // Not fusable (K % 128 != 0, or more than one row per pass): refused, not silently unsimulated.
  EXPECT_FALSE(cuda::gemv_fuses_act_fp8(tiny_bf16_args(128, 3)));
  cuda::GemvArgs bad = tiny_bf16_args(96, 1);
  bad.act_fp8 = true;
  auto dummy_w = dev(std::vector<uint16_t>(4 * 96));
  auto dummy_x = dev(std::vector<float>(96));
  auto dummy_y = dev(std::vector<float>(4));
  bad.w = dummy_w.data();
  bad.x = dummy_x.data();
  bad.y = dummy_y.data();
  EXPECT_FALSE(cuda::gemv_fuses_act_fp8(bad));
  EXPECT_EQ(cuda::gemv(bad, nullptr), cudaErrorInvalidValue);
}

// How x's values spread: normal; wide (each 128-block scaled by 2^[-60, 60], its values by 2^[-20, 0] more, the
// second block all zero); one tiny block (all zero but one block scaled by 2^-100, so that y is that block's alone).
enum class XRange { Normal, Wide, OneTinyBlock };

// A one-row kernel called directly (gemv_stream, gemv_small) over `problems` stacked problems of N x K with their
// own x and y rows: accumulate onto y0, the FP8 activation simulation when act8, FP8 scales as the 128 x 128 grid
// when block_scales (else a copy per row). Every element against the double reference of the (simulated) x; with
// act8 also bit for bit the same kernel fed pre-simulated x. `accept` sees the args first (its own checks; false:
// not run).
void check_one_row_kernel(const std::string& name, int N, int K, int problems, bool fp8, bool act8, int leave_sms,
                          std::mt19937_64& g, const std::function<bool(const cuda::GemvArgs&, const std::string&)>& accept,
                          const std::function<cudaError_t(const cuda::GemvArgs&)>& run, XRange range = XRange::Normal,
                          bool block_scales = false) {
  Weights w = make_weights(fp8, N, K, problems, g);
  const DeviceWeights dw(w);
  const int xstride = K + 64;
  auto x = normal(size_t(problems) * xstride, g);
  if (range != XRange::Normal) {
    std::uniform_int_distribution<int> block_exp(-60, 60), value_exp(-20, 0);
    for (int p = 0; p < problems; ++p)
      for (int b = 0; b < K / 128; ++b) {
        const int be = range == XRange::Wide ? block_exp(g) : -100;
        for (int k = b * 128; k < (b + 1) * 128; ++k) {
          float& v = x[size_t(p) * xstride + k];
          if (range == XRange::Wide) v = b == 1 ? 0.0f : std::ldexp(v, be + value_exp(g));
          else v = b == K / 256 ? std::ldexp(v, be) : 0.0f;
        }
      }
  }
  std::vector<float> xs = x;  // what the kernel multiplies
  if (act8) ref::fp8_block_sim(xs.data(), problems, xstride, K, 128);
  auto y0 = normal(size_t(problems) * N, g);  // accumulated onto
  auto dx = dev(x), dxs = dev(xs);
  auto y = dev(y0), y_sep = dev(y0);
  cuda::GemvArgs a = dw.args(w, dx.data(), xstride, y.data(), N, 1, block_scales);
  a.x_stride = xstride;
  a.y_stride = N;
  a.problems = problems;
  a.accumulate = true;
  a.act_fp8 = act8;
  a.leave_sms = leave_sms;
  const std::string what = name + (fp8 ? " fp8 " : " bf16 ") + (act8 ? "act8 " : "") +
                           (range == XRange::Wide ? "wide x " : range == XRange::OneTinyBlock ? "one tiny block " : "") +
                           (block_scales ? "block scales " : "");
  if (!accept(a, what)) return;
  MOESERVE_CUDA_CHECK(run(a));
  const std::vector<float> got = host(y);
  for (int p = 0; p < problems; ++p) {
    Weights wp = w;  // problem p's rows
    wp.deq.assign(w.deq.begin() + size_t(p) * N * K, w.deq.begin() + size_t(p + 1) * N * K);
    std::vector<float> xp(xs.begin() + size_t(p) * xstride, xs.begin() + size_t(p + 1) * xstride);
    std::vector<float> want, tol;
    skinny_expected(xp, xstride, wp, 1, &want, &tol);
    for (int n = 0; n < N; ++n) want[n] += y0[size_t(p) * N + n];  // y0's add: one more rounding
    for (int n = 0; n < N; ++n) tol[n] += std::fabs(want[n]) * 2.0f / 16777216.0f;
    expect_close(std::vector<float>(got.begin() + size_t(p) * N, got.begin() + size_t(p + 1) * N), want, tol,
                 what + " problem " + std::to_string(p));
  }
  if (act8) {
    cuda::GemvArgs sep = a;
    sep.act_fp8 = false;
    sep.x = dxs.data();
    sep.y = y_sep.data();
    MOESERVE_CUDA_CHECK(run(sep));
    expect_same_bits(got, host(y_sep), what + ": simulated on load against separate simulation");
  }
}

// The streaming one-row kernel called directly (gemv() routes FP8 rows to it): stacked problems with
// their own x and y, rows not a multiple of its 4-row units, K not a multiple of its 2 x 512-byte steps,
// accumulate, the FP8 activation simulation in its staging (bit for bit the kernel fed pre-simulated x), and FP8
// scales as a copy per row or as the 128 x 128 grid (problems of 1026 and 130 rows: a last block row of 2).
TEST(CudaGemm, StreamingGemvOneRow) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int N, K, problems; const char* name; };
  for (Shape s : {Shape{1026, 1536, 3, "pro wq_b-like K"}, Shape{37, 4096, 1, "few rows"},
                  Shape{4096, 2048, 1, "flash w2"}, Shape{130, 16384, 2, "longest K"}})
    for (int variant = 0; variant < 3; ++variant) {  // BF16, FP8 with per-row scales, FP8 with block scales
      const bool fp8 = variant > 0, blk = variant == 2;
      for (bool act8 : {false, true})
        check_one_row_kernel(
            std::string("gemv_stream ") + s.name, s.N, s.K, s.problems, fp8, act8, 0, g,
            [](const cuda::GemvArgs& a, const std::string& what) {
              EXPECT_TRUE(cuda::gemv_stream_fits(a)) << what;
              return cuda::gemv_stream_fits(a);
            },
            [](const cuda::GemvArgs& a) { return cuda::gemv_stream(a, nullptr); }, XRange::Normal, blk);
    }
  const cuda::GemvArgs two_rows = tiny_bf16_args(128, 2);  // not its case: refused
  EXPECT_FALSE(cuda::gemv_stream_fits(two_rows));
  EXPECT_EQ(cuda::gemv_stream(two_rows, nullptr), cudaErrorInvalidValue);
}

// The one-batch kernel for small matrices called directly (gemv() routes one row over some to it): stacked
// problems with their own x and y, rows not a multiple of its 8-row chunks or of its rows per block, pieces per
// lane that are not a power of two (K = 1536, 7168 FP8), accumulate, the FP8 activation simulation in its staging
// (bit for bit the kernel fed pre-simulated x), and the rows per block it picks, with and without leave_sms.
TEST(CudaGemm, OneBatchGemvSmallMatrices) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int N, K, problems, leave_sms; const char* name; };
  for (Shape s : {Shape{1026, 1536, 3, 0, "pro wq_b-like K"}, Shape{37, 4096, 1, 0, "few rows"},
                  Shape{4096, 2048, 1, 0, "flash w2"}, Shape{4096, 2048, 1, 33, "flash w2 beside a branch"},
                  Shape{8190, 1024, 1, 0, "indexer wq_b-like"}, Shape{130, 7168, 2, 0, "pro K"},
                  Shape{1024, 4096, 1, 0, "wo_a group"}, Shape{500, 2048, 2, 0, "two slices"}})
    // (8 rows a block: BF16 rows copied in K slices, four of 2 KB for K = 4096, two for K = 2048.)
    for (bool fp8 : {false, true}) {
      if (!fp8 && s.K > 4096) continue;  // BF16 rows of more than 8 KB: not its case (below)
      for (bool act8 : {false, true})
        check_one_row_kernel(
            std::string("gemv_small ") + s.name, s.N, s.K, s.problems, fp8, act8, s.leave_sms, g,
            [&](const cuda::GemvArgs& a, const std::string& what) {
              const int rows = cuda::gemv_small_rows_per_block(a);
              EXPECT_GT(rows, 0) << what;
              EXPECT_EQ(rows % 8, 0) << what;
              if (s.N == 4096 && s.K == 2048) EXPECT_EQ(rows, s.leave_sms ? 48 : 32) << what;  // 128 / 86 of 132 SMs
              return rows > 0;
            },
            [](const cuda::GemvArgs& a) { return cuda::gemv_small(a, nullptr); });
    }
  // x's values spread over 120 binades between blocks and 20 within one, a zero block, and one block of values near
  // 2^-100 alone (y is then that block's alone): the fp32 products, and the FP8 simulation's block scales at their
  // extremes (its 1e-4 amax floor included).
  for (XRange range : {XRange::Wide, XRange::OneTinyBlock})
    for (bool act8 : {false, true})
      check_one_row_kernel(
          "gemv_small flash w2", 4096, 2048, 1, true, act8, 0, g, [](const cuda::GemvArgs&, const std::string&) { return true; },
          [](const cuda::GemvArgs& a) { return cuda::gemv_small(a, nullptr); }, range);
  // Not its case: refused. Two rows; a BF16 row of 7168 (14 KB); 4096 x 8192 FP8 (wo_b: 256 KB per block); rows
  // not a multiple of 512 bytes.
  auto dummy = dev(std::vector<float>(64));
  auto shape = [&](bool fp8, int N, int K, int M) { return shape_args(dummy.data(), fp8, N, K, M); };
  EXPECT_EQ(cuda::gemv_small_rows_per_block(shape(true, 4096, 2048, 2)), 0);
  EXPECT_EQ(cuda::gemv_small_rows_per_block(shape(false, 1024, 7168, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_rows_per_block(shape(true, 4096, 8192, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_rows_per_block(shape(true, 64, 640, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_rows_per_block(shape(true, 8192, 1024, 1)), 64);
  cuda::GemvArgs grid_scales = shape(true, 8192, 1024, 1);  // FP8 scales as the 128 x 128 grid: copies per row only
  grid_scales.scale_row_shift = 7;
  EXPECT_EQ(cuda::gemv_small_rows_per_block(grid_scales), 0);
  // Where gemv() routes to it: BF16 rows of >= 2 KB, <= 64 KB per block, blocks on most SMs.
  EXPECT_TRUE(cuda::gemv_small_preferred(shape(false, 1024, 4096, 1)));   // BF16 wq_a / wo_a group
  EXPECT_FALSE(cuda::gemv_small_preferred(shape(true, 4096, 2048, 1)));   // FP8 (shared w2): the streaming kernel
  EXPECT_FALSE(cuda::gemv_small_preferred(shape(true, 8192, 1024, 1)));   // indexer wq_b: 1 KB rows
  EXPECT_FALSE(cuda::gemv_small_preferred(shape(true, 4096, 4096, 1)));   // shared w13: 128 KB per block
  EXPECT_FALSE(cuda::gemv_small_preferred(shape(true, 512, 4096, 1)));    // wkv: 64 blocks
  EXPECT_EQ(cuda::gemv_small(shape(true, 4096, 2048, 2), nullptr), cudaErrorInvalidValue);
}

// gemv_small's FP8 rows on tensor cores (gemv_small_tc), called directly: the V4-Flash shapes it is built for (shared
// w2, the indexer's wq_b, wq_a), a last block of one row and one of 12, accumulate, the FP8 activation simulation (bit
// for bit the kernel fed pre-simulated x, whose exact f16 terms then hold one term each), scales as a copy per row
// and as the 128 x 128 grid, x over 120 binades between blocks and 20 within one (the four f16 terms) and one block
// near 2^-100 alone; and the shapes it refuses.
TEST(CudaGemm, OneBatchGemvSmallTensorCores) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  const int sms = cuda::device_info().multiprocessors;
  struct Shape { int N, K; const char* name; };
  for (Shape s : {Shape{4096, 2048, "flash shared w2"}, Shape{8192, 1024, "indexer wq_b"}, Shape{1024, 4096, "wq_a"},
                  Shape{4001, 2048, "a last block of one row"}, Shape{300, 1024, "few rows"}})
    for (int run = 0; run < 4; ++run) {
      const bool act8 = run & 1, blk = run >= 2;
      check_one_row_kernel(
          std::string("gemv_small_tc ") + s.name, s.N, s.K, 1, true, act8, 0, g,
          [&](const cuda::GemvArgs& a, const std::string& what) {
            const int rows = cuda::gemv_small_tc_rows_per_block(a);
            EXPECT_GT(rows, 0) << what;
            EXPECT_EQ(rows % 16, 0) << what;
            if (sms == 132 && s.N == 4096) EXPECT_EQ(rows, 32) << what;  // 128 blocks of 64 KB
            if (sms == 132 && s.N == 8192) EXPECT_EQ(rows, 64) << what;
            return rows > 0;
          },
          [](const cuda::GemvArgs& a) { return cuda::gemv_small_tc(a, nullptr); }, XRange::Normal, blk);
    }
  for (XRange range : {XRange::Wide, XRange::OneTinyBlock})
    for (int run = 0; run < 4; ++run)
      check_one_row_kernel(
          "gemv_small_tc flash shared w2", 4096, 2048, 1, true, run & 1, 0, g,
          [](const cuda::GemvArgs&, const std::string&) { return true; },
          [](const cuda::GemvArgs& a) { return cuda::gemv_small_tc(a, nullptr); }, range, run >= 2);
  // Not its case: refused. Two rows; two problems; BF16; K = 1536 and 8192; 4096 x 4096 (128 KB a block). On a side
  // branch (leave_sms) the same rows: its blocks are short and leave room beside them.
  auto dummy = dev(std::vector<float>(64));
  auto shape = [&](bool fp8, int N, int K, int M) { return shape_args(dummy.data(), fp8, N, K, M); };
  EXPECT_GT(cuda::gemv_small_tc_rows_per_block(shape(true, 4096, 2048, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(shape(true, 4096, 2048, 2)), 0);
  cuda::GemvArgs two_problems = shape(true, 4096, 2048, 1);
  two_problems.problems = 2;
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(two_problems), 0);
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(shape(false, 1024, 4096, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(shape(true, 4096, 1536, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(shape(true, 1024, 8192, 1)), 0);
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(shape(true, 4096, 4096, 1)), 0);
  cuda::GemvArgs two_row_blocks = shape(true, 4096, 2048, 1);  // scales shared by 2 rows: blocks span 16 of them
  two_row_blocks.scale_row_shift = 1;
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(two_row_blocks), 0);
  cuda::GemvArgs beside = shape(true, 4096, 2048, 1);
  beside.leave_sms = sms / 4;
  EXPECT_EQ(cuda::gemv_small_tc_rows_per_block(beside), cuda::gemv_small_tc_rows_per_block(shape(true, 4096, 2048, 1)));
  EXPECT_EQ(cuda::gemv_small_tc(shape(true, 4096, 2048, 2), nullptr), cudaErrorInvalidValue);
  // gemv()'s default route (MOESERVE_GEMV_TC unset): the indexer's wq_b and shared w2 here, wq_a (64 blocks) not.
  if (!std::getenv("MOESERVE_GEMV_TC") && sms == 132) {
    EXPECT_TRUE(cuda::gemv_small_tc_preferred(shape(true, 4096, 2048, 1)));
    EXPECT_TRUE(cuda::gemv_small_tc_preferred(shape(true, 8192, 1024, 1)));
    EXPECT_FALSE(cuda::gemv_small_tc_preferred(shape(true, 1024, 4096, 1)));
    EXPECT_FALSE(cuda::gemv_small_tc_preferred(shape(true, 4096, 2048, 2)));
  }
}

// The grouped low-rank output projection: G problems with strided inputs and outputs (V4-Flash and V4-Pro).
TEST(CudaGemm, SkinnyGemmGroupedOutputProjection) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (auto [H, G] : std::vector<std::pair<int, int>>{{64, 8}, {128, 16}}) {
    const int hd = 512, olora = 1024, group_in = H * hd / G, T = 2;
    Weights w = make_weights(false, G * olora, group_in, 1, g);
    auto wb = dev(w.bf16);
    auto o = normal(size_t(T) * H * hd, g);
    auto dx = dev(o);
    auto y = poisoned<float>(size_t(T) * G * olora);
    cuda::GemvArgs a;
    a.w = wb.data();
    a.N = olora;
    a.K = group_in;
    a.w_stride = (long long)olora * group_in;
    a.x = dx.data();
    a.ldx = H * hd;
    a.x_stride = group_in;
    a.y = y.data();
    a.ldy = G * olora;
    a.y_stride = olora;
    a.M = T;
    a.problems = G;
    MOESERVE_CUDA_CHECK(cuda::gemv(a, nullptr));
    std::vector<float> want(size_t(T) * G * olora), tol(want.size());
    for (int t = 0; t < T; ++t)
      for (int gg = 0; gg < G; ++gg)
        for (int r = 0; r < olora; ++r) {
          double s = 0, as = 0;
          for (int k = 0; k < group_in; ++k) {
            const double p = double(o[size_t(t) * H * hd + size_t(gg) * group_in + k]) *
                             double(w.deq[(size_t(gg) * olora + r) * group_in + k]);
            s += p;
            as += std::fabs(p);
          }
          want[size_t(t) * G * olora + size_t(gg) * olora + r] = float(s);
          tol[size_t(t) * G * olora + size_t(gg) * olora + r] = float(kSkinnyTol * as);
        }
    expect_close(host(y), want, tol, "grouped wo_a H=" + std::to_string(H));
  }
}

// Routing -> groups -> grouped skinny GEMM over stacked experts (W13 with gathered token rows) -> combine. Each
// case runs the GEMM with the group rows unknown (max_group_rows 0) and bounded by T, as the engine passes them;
// at T == 1 that is the streaming kernel's grouped form, also with more grid problems than groups (the spare blocks
// must write nothing) and with the FP8 activation simulation in its staging.
TEST(CudaGemm, MoeGroupedExpertsAndCombine) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case { int E, K, T, D, N; bool fp8; };
  for (Case c : {Case{256, 6, 1, 2048, 128, true}, Case{256, 6, 8, 512, 512, false}, Case{8, 2, 5, 64, 64, false},
                 Case{384, 6, 3, 1024, 128, true}, Case{384, 6, 1, 7168, 260, true}, Case{16, 4, 1, 1536, 64, false}}) {
    Weights w = make_weights(c.fp8, c.N, c.D, c.E, g);
    const DeviceWeights dw(w);
    std::vector<int> chosen(size_t(c.T) * c.K);
    std::vector<float> weight(chosen.size());
    for (int t = 0; t < c.T; ++t)
      for (int k = 0; k < c.K; ++k) {
        int e;
        bool dup;
        do {  // distinct experts per token
          e = int(g() % c.E);
          dup = false;
          for (int q = 0; q < k; ++q) dup |= chosen[size_t(t) * c.K + q] == e;
        } while (dup);
        chosen[size_t(t) * c.K + k] = e;
        weight[size_t(t) * c.K + k] = float(g() % 1000) / 1000.0f;
      }
    auto x = normal(size_t(c.T) * c.D, g);
    auto dchosen = dev(chosen);
    auto dweight = dev(weight);
    auto dx = dev(x);
    const int TK = c.T * c.K;
    cuda::DeviceArray<int> ge(size_t(c.E), "g"), go(size_t(c.E), "g"), gc(size_t(c.E), "g"), ng(1, "g");
    auto row_of_slot = poisoned<int>(size_t(TK));
    auto token_of_row = poisoned<int>(size_t(TK));
    auto weight_of_row = poisoned<float>(size_t(TK));
    MOESERVE_CUDA_CHECK(cuda::moe_group(dchosen.data(), dweight.data(), c.T, c.K, c.E, nullptr, ge.data(), go.data(),
                                        gc.data(), ng.data(), row_of_slot.data(), token_of_row.data(),
                                        weight_of_row.data(), nullptr));
    auto rows = host(row_of_slot);
    auto toks = host(token_of_row);
    auto wrow = host(weight_of_row);
    // Every slot has its own row, holding its token and weight.
    std::vector<int> seen(size_t(TK), 0);
    for (int i = 0; i < TK; ++i) {
      const int r = rows[size_t(i)];
      ASSERT_TRUE(r >= 0 && r < TK) << "slot " << i;
      ++seen[size_t(r)];
      ASSERT_EQ(toks[size_t(r)], i / c.K);
      ASSERT_EQ(wrow[size_t(r)], weight[size_t(i)]);
    }
    for (int r = 0; r < TK; ++r) ASSERT_EQ(seen[size_t(r)], 1) << "row " << r;
    // The groups: active experts in ascending order, each with its slot count and the rows before it; each slot's
    // row inside its expert's range.
    std::vector<int> count(size_t(c.E), 0);
    for (int e : chosen) ++count[size_t(e)];
    const auto hge = host(ge), hgo = host(go), hgc = host(gc);
    int groups = 0, off = 0;
    std::vector<int> offset(size_t(c.E));
    for (int e = 0; e < c.E; ++e) {
      offset[size_t(e)] = off;
      if (count[size_t(e)] > 0) {
        ASSERT_EQ(hge[size_t(groups)], e) << "group " << groups;
        ASSERT_EQ(hgo[size_t(groups)], off) << "group " << groups;
        ASSERT_EQ(hgc[size_t(groups)], count[size_t(e)]) << "group " << groups;
        ++groups;
      }
      off += count[size_t(e)];
    }
    ASSERT_EQ(host(ng)[0], groups);
    for (int i = 0; i < TK; ++i) {
      const int e = chosen[size_t(i)], r = rows[size_t(i)];
      ASSERT_TRUE(r >= offset[size_t(e)] && r < offset[size_t(e)] + count[size_t(e)]) << "slot " << i;
    }
    std::vector<float> xs = x;  // x with the FP8 activation simulation
    ref::fp8_block_sim(xs.data(), c.T, c.D, c.D, 128);
    struct Variant { int max_rows, extra_problems; bool act8; };
    std::vector<Variant> variants{{0, 0, false}, {c.T, 0, false}};
    if (c.T == 1) variants.push_back({1, 3, false});
    if (c.T == 1 && c.fp8) variants.push_back({1, 0, true});
    std::vector<float> gy;
    for (const Variant v : variants) {
      auto y = poisoned<float>(size_t(TK) * c.N);
      cuda::GemvArgs a = dw.args(w, dx.data(), c.D, y.data(), c.N, 0);  // M unused: groups carry their rows
      a.problems = std::min(c.E, TK) + v.extra_problems;
      a.group_expert = ge.data();
      a.group_offset = go.data();
      a.group_count = gc.data();
      a.num_groups = ng.data();
      a.x_rows = token_of_row.data();
      a.max_group_rows = v.max_rows;
      a.act_fp8 = v.act8;
      const std::string what = "grouped experts E=" + std::to_string(c.E) + " T=" + std::to_string(c.T) +
                               " max_group_rows=" + std::to_string(v.max_rows) + " problems=" +
                               std::to_string(a.problems) + (v.act8 ? " act8" : "");
      EXPECT_EQ(cuda::gemv_stream_fits(a), v.max_rows == 1) << what;
      EXPECT_EQ(cuda::gemv_stream_preferred(a), v.max_rows == 1 && c.fp8) << what;  // gemv() routes FP8 there
      if (!std::getenv("MOESERVE_GEMV_STREAM_BF16")) {  // on a side branch (leave_sms) BF16 rows stream too
        a.leave_sms = 8;
        EXPECT_EQ(cuda::gemv_stream_preferred(a), v.max_rows == 1) << what << " leave_sms=8";
        a.leave_sms = 0;
      }
      // BF16 one-row groups called directly (gemv() keeps them on the one-pass kernel).
      MOESERVE_CUDA_CHECK(v.max_rows == 1 ? cuda::gemv_stream(a, nullptr) : cuda::gemv(a, nullptr));
      gy = host(y);
      // Each slot's row holds its expert's product.
      std::vector<float> got, want, tol;
      const std::vector<float>& xm = v.act8 ? xs : x;
      for (int i = 0; i < TK; ++i) {
        const int r = rows[size_t(i)], e = chosen[size_t(i)];
        for (int n = 0; n < c.N; ++n) {
          double ry, as;
          reference(xm.data(), c.D, w.deq.data() + size_t(e) * c.N * c.D, c.D, i / c.K, n, &ry, &as);
          got.push_back(gy[size_t(r) * c.N + n]);
          want.push_back(float(ry));
          tol.push_back(float(kSkinnyTol * as));
        }
      }
      expect_close(got, want, tol, what);
    }
    // Combine (N == D only): out[t] = base[t] + sum_k y[row(t, k)] in k order.
    if (c.N == c.D) {
      auto base = normal(size_t(c.T) * c.D, g);
      auto out = dev(base);
      auto y = dev(gy);  // the last variant's rows
      MOESERVE_CUDA_CHECK(cuda::moe_combine(y.data(), c.D, row_of_slot.data(), c.T, c.K, out.data(), nullptr));
      std::vector<float> wc = base;
      for (int t = 0; t < c.T; ++t)
        for (int k = 0; k < c.K; ++k)
          for (int d = 0; d < c.D; ++d) wc[size_t(t) * c.D + d] += gy[size_t(rows[size_t(t) * c.K + k]) * c.N + d];
      expect_equal(host(out), wc, "moe_combine");
    }
  }
}

// FP8 weights' 128x128 block scales in cuBLASLt's layout ([N/128][ld], ld = round_up(K/128, 4)), as the engine
// keeps them (GemmView::blk_scale).
std::vector<float> block_scales(const Weights& w, int* ld) {
  const int sld = w.sld();
  *ld = (sld + 3) / 4 * 4;
  std::vector<float> blk(size_t(w.N / 128) * *ld, 0.0f);
  for (int br = 0; br < w.N / 128; ++br)
    for (int kb = 0; kb < sld; ++kb) blk[size_t(br) * *ld + kb] = w.row_scale[size_t(br) * 128 * sld + kb];
  return blk;
}

TEST(CudaGemm, CublasLtBf16AndFp8BlockScaled) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  cuda::Blas blas;
  struct Shape { int M, N, K; };
  for (Shape s : {Shape{256, 1024, 4096}, Shape{64, 4096, 2048}, Shape{512, 512, 4096}, Shape{128, 7168, 1536}}) {
    auto x = normal(size_t(s.M) * s.K, g);
    auto dx = dev(x);
    for (bool fp8 : {false, true}) {
      Weights w = make_weights(fp8, s.N, s.K, 1, g);
      auto y = poisoned<float>(size_t(s.M) * s.N);
      std::vector<float> xr(x.size());  // the activations the GPU multiplies
      bool ran;
      if (!fp8) {
        auto wb = dev(w.bf16);
        cuda::DeviceArray<uint16_t> xb(x.size(), "xb");
        MOESERVE_CUDA_CHECK(cuda::to_bf16(dx.data(), s.M, s.K, s.K, xb.data(), nullptr));
        ran = blas.gemm_bf16(xb.data(), wb.data(), y.data(), s.M, s.N, s.K, s.N, nullptr);
        for (size_t i = 0; i < x.size(); ++i) xr[i] = round_to_bf16(x[i]);
      } else {
        auto wq = dev(w.q);
        int bld;
        auto dblk = dev(block_scales(w, &bld));
        cuda::DeviceArray<uint8_t> xq(x.size(), "xq");
        cuda::DeviceArray<float> xs(size_t(s.M) * (s.K / 128), "xs");
        MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(dx.data(), s.M, s.K, s.K, xq.data(), xs.data(), nullptr));
        ran = blas.gemm_fp8_block(xq.data(), xs.data(), wq.data(), dblk.data(), y.data(), s.M, s.N, s.K, s.N, nullptr);
        xr = x;
        ref::fp8_block_sim(xr.data(), s.M, s.K, s.K, 128);
      }
      ASSERT_TRUE(ran) << "cuBLASLt found no algorithm for " << (fp8 ? "block-scaled FP8" : "BF16") << " M=" << s.M
                       << " N=" << s.N << " K=" << s.K;
      std::vector<float> want, tol;
      const float rel = fp8 ? 1.0f / 1024.0f : 2.0f * float(s.K) / 16777216.0f;
      expected_rows(xr, s.K, w, s.M, rel, 0.0, &want, &tol);
      expect_close(host(y), want, tol,
                   std::string("cuBLASLt ") + (fp8 ? "fp8 block " : "bf16 ") + std::to_string(s.M) + "x" +
                       std::to_string(s.N) + "x" + std::to_string(s.K));
    }
  }
}

// The FP8 linear as the model runs it past 64 rows (Blas::linear_fp8_block: the official quantizer, then cuBLASLt's
// block-scaled GEMM), at row counts cuBLASLt has no algorithm for (769: three 256-token prompts and a decode row;
// such rows run padded with zero rows) and ones it has; x and y with row strides past their widths, y's pad
// poisoned (the padded rows must not land in y). Against the double reference on the quantized x, the tolerance
// of CublasLtBf16AndFp8BlockScaled.
TEST(CudaGemm, Fp8LinearAtAnyRowCount) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  cuda::Blas blas;
  struct Shape { int M, N, K; };
  for (Shape s : {Shape{769, 512, 1024}, Shape{768, 512, 1024}, Shape{65, 256, 2048}, Shape{1001, 384, 512}}) {
    const int ldx = s.K + 4, ldy = s.N + 8;
    auto x = normal(size_t(s.M) * ldx, g);
    auto dx = dev(x);
    Weights w = make_weights(true, s.N, s.K, 1, g);
    auto wq = dev(w.q);
    int bld;
    auto dblk = dev(block_scales(w, &bld));
    cuda::DeviceBuffer scratch(blas.linear_fp8_block_scratch(s.M, s.N, s.K, ldy), "scratch");
    auto y = poisoned<float>(size_t(s.M) * ldy);
    ASSERT_TRUE(blas.linear_fp8_block(dx.data(), s.M, s.K, ldx, wq.data(), dblk.data(), s.N, y.data(), ldy,
                                      scratch.data(), nullptr))
        << "M=" << s.M;
    std::vector<float> xr(size_t(s.M) * s.K);
    for (int m = 0; m < s.M; ++m)
      std::copy_n(x.data() + size_t(m) * ldx, s.K, xr.data() + size_t(m) * s.K);
    ref::fp8_block_sim(xr.data(), s.M, s.K, s.K, 128);
    const std::vector<float> got = host(y);
    std::vector<float> got_rows(size_t(s.M) * s.N), want, tol;
    for (int m = 0; m < s.M; ++m) {
      std::copy_n(got.data() + size_t(m) * ldy, s.N, got_rows.data() + size_t(m) * s.N);
      for (int n = s.N; n < ldy; ++n)
        ASSERT_TRUE(std::isnan(got[size_t(m) * ldy + n])) << "row " << m << " pad " << n << " written, M=" << s.M;
    }
    expected_rows(xr, s.K, w, s.M, 1.0 / 1024.0, 0.0, &want, &tol);
    expect_close(got_rows, want, tol, "fp8 linear M=" + std::to_string(s.M));
  }
}

// An fp32-input linear with BF16 weights as the model runs it past 8 rows (GpuModel::linear, fp32_input): x split
// into two or three bf16 terms, then Blas::gemm_bf16_terms (stacked as rows of one cuBLASLt GEMM and added in
// order up to 64 rows, one accumulating GEMM per term past that). Against the double reference on the fp32 x: the
// split carries x to 2^-16 (two terms) or 2^-26 (three) of each |x|, plus fp32 accumulation. Shapes: the random
// test models' router gate (N 8) and head (N 320), V4-Flash's and V4-Pro's router gates, a V4-Flash compressor.
TEST(CudaGemm, Bf16GemmOfFp32InputByStackedSplit) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  cuda::Blas blas;
  struct Shape { int M, N, K; };
  for (Shape s : {Shape{32, 8, 256}, Shape{32, 320, 256}, Shape{16, 64, 256}, Shape{64, 1024, 4096},
                  Shape{32, 256, 4096}, Shape{64, 384, 7168}, Shape{9, 1024, 4096}, Shape{80, 256, 4096}})
    for (int nterms : {2, 3}) {
      auto x = normal(size_t(s.M) * s.K, g);
      auto dx = dev(x);
      Weights w = make_weights(false, s.N, s.K, 1, g);
      auto wb = dev(w.bf16);
      cuda::DeviceArray<uint16_t> terms(size_t(nterms) * x.size(), "terms");
      cuda::DeviceArray<float> parts(size_t(nterms) * s.M * s.N, "parts");
      MOESERVE_CUDA_CHECK(cuda::to_bf16_split(dx.data(), s.M, s.K, s.K, terms.data(), terms.data() + x.size(), nullptr,
                                              nterms == 3 ? terms.data() + 2 * x.size() : nullptr));
      const int ldy = s.N + 8;  // the pad must stay poisoned
      auto y = poisoned<float>(size_t(s.M) * ldy);
      ASSERT_TRUE(blas.gemm_bf16_terms(terms.data(), nterms, wb.data(), y.data(), s.M, s.N, s.K, ldy,
                                       s.M <= cuda::Blas::kStackedRows ? parts.data() : nullptr, nullptr));
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = host(y);
      std::vector<float> rows(size_t(s.M) * s.N), want(rows.size()), tol(rows.size());
      // The split's error (2^-16 or 2^-26 of |x|) plus fp32 accumulation.
      const float rel = std::ldexp(1.0f, nterms == 2 ? -16 : -26) + 2.0f * float(s.K) / 16777216.0f;
      for (int m = 0; m < s.M; ++m)
        for (int n = 0; n < s.N; ++n) {
          double r, as;
          reference(x.data(), s.K, w.deq.data(), s.K, m, n, &r, &as);
          want[size_t(m) * s.N + n] = float(r);
          tol[size_t(m) * s.N + n] = float(rel * as);
          rows[size_t(m) * s.N + n] = got[size_t(m) * ldy + n];
          for (int pad = s.N; pad < ldy; ++pad) ASSERT_TRUE(std::isnan(got[size_t(m) * ldy + pad])) << "row " << m;
        }
      expect_close(rows, want, tol,
                   "bf16 " + std::to_string(nterms) + "-term split " + std::to_string(s.M) + "x" +
                       std::to_string(s.N) + "x" + std::to_string(s.K));
    }
}

// The tensor-core skinny FP8 GEMM (1..64 rows, swap-AB wgmma) against the double reference on the FP8-simulated
// activations and the dequantized weights, with cuBLASLt's FP8 tolerance (tensor-core precision inside each 128-k
// block); rows past M of the 8..64-row tile must not be written.
TEST(CudaGemm, SkinnyFp8TensorCoreGemm) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int N, K; };
  for (Shape s : {Shape{1024, 4096}, Shape{4096, 2048}, Shape{8192, 1024}, Shape{7168, 1536}, Shape{256, 128}}) {
    Weights w = make_weights(true, s.N, s.K, 1, g);
    auto wq = dev(w.q);
    int bld;
    auto dblk = dev(block_scales(w, &bld));
    for (int M : {1, 3, 8, 13, 32, 64}) {
      ASSERT_TRUE(cuda::gemm_fp8_skinny_fits(M, s.N, s.K));
      auto x = normal(size_t(M) * s.K, g);
      auto dx = dev(x);
      cuda::DeviceArray<uint8_t> xq(x.size(), "xq");
      cuda::DeviceArray<float> xs(size_t(M) * (s.K / 128), "xs");
      MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(dx.data(), M, s.K, s.K, xq.data(), xs.data(), nullptr));
      const int ldy = s.N + 64;  // the pad past N must stay poisoned
      std::vector<float> xr = x;
      ref::fp8_block_sim(xr.data(), M, s.K, s.K, 128);
      std::vector<float> want, tol;
      expected_rows(xr, s.K, w, M, 1.0 / 1024.0, 0.0, &want, &tol);
      // With the workspace its K splits (gemm_fp8_skinny_splits), without it one pass.
      const size_t wsn = cuda::gemm_fp8_skinny_workspace_floats(M, s.N, s.K);
      cuda::DeviceArray<float> work(std::max<size_t>(wsn, 1), "split workspace");
      for (bool split : {true, false}) {
        auto y = poisoned<float>(size_t(M) * ldy);
        MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny(xq.data(), xs.data(), M, M, wq.data(), dblk.data(), bld, s.N, s.K,
                                                  y.data(), ldy, split ? work.data() : nullptr, split ? wsn : 0,
                                                  nullptr));
        MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
        const auto got = host(y);
        std::vector<float> rows(want.size());
        for (int m = 0; m < M; ++m)
          for (int n = 0; n < s.N; ++n) rows[size_t(m) * s.N + n] = got[size_t(m) * ldy + n];
        expect_close(rows, want, tol,
                     "skinny fp8 wgmma " + std::to_string(M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
                         (split ? " in " + std::to_string(cuda::gemm_fp8_skinny_splits(s.N, s.K)) + " K splits" : ""));
        for (int m = 0; m < M; ++m)
          for (int n = s.N; n < ldy; ++n)
            ASSERT_TRUE(std::isnan(got[size_t(m) * ldy + n])) << "written past N at row " << m << " column " << n;
      }
    }
  }
}

// The BF16-activation x FP8-weight skinny GEMM (V4's grouped wo_a at 1..64 rows: a BF16 einsum on the dequantized
// weight) against the double reference on bf16-rounded activations and the dequantized weights, `problems` groups
// side by side, with the BF16 GEMM's fp32-accumulation tolerance; columns past the problems' outputs must stay
// unwritten. With two or three terms (hi, lo, lo2 rows, as the engine feeds wo_a its fp32 input) against the
// unrounded activations, to the split's 16 or 24 significant bits.
TEST(CudaGemm, SkinnyBf16ActFp8WeightGemm) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int problems, N, K; std::vector<int> Ms; };
  for (const Shape& s : {Shape{8, 1024, 4096, {1, 3, 8, 13, 32, 64}}, Shape{16, 1024, 4096, {5}},
                         Shape{1, 256, 128, {2, 64}}, Shape{3, 384, 1024, {9, 40}}}) {
    const int NT = s.problems * s.N, KT = s.problems * s.K;
    Weights w = make_weights(true, NT, s.K, 1, g);  // problem p: rows [p N, (p + 1) N)
    auto wq = dev(w.q);
    int bld;
    auto dblk = dev(block_scales(w, &bld));
    for (int M : s.Ms)
      for (int terms : {1, 2, 3}) {
        ASSERT_TRUE(cuda::gemm_bf16_fp8w_skinny_fits(M, s.N, s.K));
        auto x = normal(size_t(M) * KT, g);
        auto dx = dev(x);
        cuda::DeviceArray<uint16_t> xb(terms * x.size(), "xb");
        MOESERVE_CUDA_CHECK(cuda::bf16_permute16(dx.data(), M, KT, KT, xb.data(), nullptr,
                                                 terms >= 2 ? xb.data() + x.size() : nullptr,
                                                 terms == 3 ? xb.data() + 2 * x.size() : nullptr));
        std::vector<float> xr(x.size());
        for (size_t i = 0; i < x.size(); ++i) xr[i] = terms > 1 ? x[i] : bf16_to_f32(f32_to_bf16(x[i]));
        const int ldy = NT + 64;  // the pad past the outputs must stay poisoned
        const float split_rel = terms == 1 ? 0.0f : std::ldexp(1.0f, terms == 2 ? -16 : -26);
        const float rel = split_rel + 2.0f * float(s.K) / 16777216.0f;
        std::vector<float> want(size_t(M) * NT), tol(want.size());
        parallel_for(NT, 16, [&](int64_t b, int64_t e) {
          for (int m = 0; m < M; ++m)
            for (int64_t col = b; col < e; ++col) {
              const int p = int(col / s.N), n = int(col % s.N);
              double r, as;
              reference(xr.data() + size_t(p) * s.K, KT, w.deq.data() + size_t(p) * s.N * s.K, s.K, m, n, &r, &as);
              want[size_t(m) * NT + col] = float(r);
              tol[size_t(m) * NT + col] = float(as) * rel;
            }
        });
        const size_t wsn = cuda::gemm_bf16_fp8w_skinny_workspace_floats(M, s.N, s.K, s.problems, terms);
        cuda::DeviceArray<float> work(std::max<size_t>(wsn, 1), "split workspace");
        if (terms > 1)  // the terms are added from the workspace: without one, a clear refusal
          ASSERT_EQ(cuda::gemm_bf16_fp8w_skinny(xb.data(), M, s.problems, wq.data(), dblk.data(), bld, s.N, s.K,
                                                work.data(), ldy, nullptr, 0, nullptr, terms),
                    cudaErrorInvalidValue);
        for (bool split : terms > 1 ? std::vector<bool>{true} : std::vector<bool>{true, false}) {
          auto y = poisoned<float>(size_t(M) * ldy);
          MOESERVE_CUDA_CHECK(cuda::gemm_bf16_fp8w_skinny(xb.data(), M, s.problems, wq.data(), dblk.data(), bld, s.N,
                                                          s.K, y.data(), ldy, split ? work.data() : nullptr,
                                                          split ? wsn : 0, nullptr, terms));
          MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
          const auto got = host(y);
          std::vector<float> rows(want.size());
          for (int m = 0; m < M; ++m)
            for (int c = 0; c < NT; ++c) rows[size_t(m) * NT + c] = got[size_t(m) * ldy + c];
          const int splits = cuda::gemm_bf16_fp8w_skinny_splits(s.N, s.K, s.problems);
          expect_close(rows, want, tol,
                       "skinny bf16 x fp8w " + std::to_string(M) + "x" + std::to_string(s.problems) + "x" +
                           std::to_string(s.N) + "x" + std::to_string(s.K) +
                           (split ? " in " + std::to_string(splits) + " K splits" : "") +
                           (terms > 1 ? ", " + std::to_string(terms) + " terms" : ""));
          for (int m = 0; m < M; ++m)
            for (int c = NT; c < ldy; ++c)
              ASSERT_TRUE(std::isnan(got[size_t(m) * ldy + c])) << "written past the outputs at row " << m;
        }
      }
  }
}

// gemm_fp8_skinny over MoE groups: uneven groups (one empty), experts out of order, a grid with more slots than
// groups, against the double reference on the FP8-simulated activations with cuBLASLt's FP8 tolerance.
TEST(CudaGemm, SkinnyFp8GroupedOverExperts) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int E, N, K; std::vector<int> counts; };
  for (const Shape& s : {Shape{16, 256, 512, {3, 1, 0, 8, 2}}, Shape{12, 4096, 4096, {1, 1, 1, 1, 1, 1}},
                         Shape{8, 384, 1024, {40, 17, 64}}}) {
    Weights w = make_weights(true, s.E * s.N, s.K, 1, g);  // expert e: rows [e N, (e + 1) N)
    auto wq = dev(w.q);
    int bld;
    auto dblk = dev(block_scales(w, &bld));
    const size_t stride = size_t(s.N / 128) * bld;
    const int G = int(s.counts.size());
    std::vector<int> expert(static_cast<size_t>(G)), offset(static_cast<size_t>(G));
    int rows = 0, max_rows = 1;
    for (int z = 0; z < G; ++z) {
      expert[size_t(z)] = int((size_t(z) * 7919 + 3) % size_t(s.E));  // distinct for these shapes, out of order
      offset[size_t(z)] = rows;
      rows += s.counts[size_t(z)];
      max_rows = std::max(max_rows, s.counts[size_t(z)]);
    }
    auto x = normal(size_t(rows) * s.K, g);
    auto dx = dev(x);
    cuda::DeviceArray<uint8_t> xq(x.size(), "xq");
    cuda::DeviceArray<float> xs(size_t(rows) * (s.K / 128), "xs");
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(dx.data(), rows, s.K, s.K, xq.data(), xs.data(), nullptr));
    std::vector<float> xr = x;
    ref::fp8_block_sim(xr.data(), rows, s.K, s.K, 128);
    std::vector<float> want(size_t(rows) * s.N), tol(want.size());
    for (int z = 0; z < G; ++z)
      parallel_for(s.N, 16, [&](int64_t b, int64_t e) {
        for (int r = offset[size_t(z)]; r < offset[size_t(z)] + s.counts[size_t(z)]; ++r)
          for (int64_t n = b; n < e; ++n) {
            double v, as;
            reference(xr.data(), s.K, w.deq.data() + size_t(expert[size_t(z)]) * s.N * s.K, s.K, r, int(n), &v, &as);
            want[size_t(r) * s.N + n] = float(v);
            tol[size_t(r) * s.N + n] = float(as / 1024.0);
          }
      });
    auto de = dev(expert), doff = dev(offset), dcnt = dev(s.counts), dnum = dev(std::vector<int>{G});
    const int ldy = s.N + 32;  // the pad past N must stay poisoned
    auto y = poisoned<float>(size_t(rows) * ldy);
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny_grouped(xq.data(), xs.data(), rows, rows, max_rows, wq.data(), dblk.data(),
                                                      bld, stride, s.E, s.N, s.K, de.data(), doff.data(), dcnt.data(),
                                                      dnum.data(), G + 3, y.data(), ldy, nullptr));
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = host(y);
    std::vector<float> out(want.size());
    for (int r = 0; r < rows; ++r)
      for (int n = 0; n < s.N; ++n) out[size_t(r) * s.N + n] = got[size_t(r) * ldy + n];
    expect_close(out, want, tol, "grouped skinny fp8 E=" + std::to_string(s.E) + " N=" + std::to_string(s.N));
    for (int r = 0; r < rows; ++r)
      for (int n = s.N; n < ldy; ++n) ASSERT_TRUE(std::isnan(got[size_t(r) * ldy + n])) << "written past N, row " << r;
  }
}

}  // namespace
}  // namespace moeserve
