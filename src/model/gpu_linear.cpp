// GpuModel's linears: which kernel takes a linear of M rows (GEMV, skinny tensor-core GEMMs, cuBLASLt).
#if MOESERVE_WITH_CUDA
#include "model/gpu_model.h"

#include <algorithm>
#include <cstdio>

#include "kernels/cuda/device.h"
#include "model/gpu_model_internal.h"

namespace moeserve::model {

namespace {
using cuda::WeightType;
}  // namespace

// bench_gpu_ops linear on the H200 (docs/benchmarks/cuda-ops.md, eighth session): from 2 rows the skinny GEMM
// (with its quantizer, ~4.5 us at least) beats the multi-row GEMV 1.1-14x, except where rows x weight elements
// stay within 8M (V4-Flash wkv at 4 rows: 4.6 vs 3.8 us; wq_a at 2 rows: 5.1 vs 3.7); cuBLASLt's block-scaled
// FP8 GEMM (~15 us floor) catches up on weights of 8M+ elements past 32 rows (V4-Flash wq_b, 64 rows: 17.1 vs 25.0).
bool GpuModel::skinny_fp8_preferred(int M, int N, int K) {
  const int64_t elements = int64_t(N) * K;
  if (!cuda::gemm_fp8_skinny_fits(M, N, K) || M < 2 || M * elements <= (int64_t(8) << 20)) return false;
  return M <= 32 || elements < (int64_t(8) << 20);
}

// BF16 linears (fp32 input as bf16 terms): cuBLASLt past 8 rows, and from 2 rows where rows x weight elements reach
// 32M. bench_gpu_ops linear on the H200, three terms against the fp32 GEMV (docs/benchmarks/cuda-ops.md, twenty-ninth
// session): the 1 GB head 257 / 265 / 276 against 364 / 719 / 1029 us at 2 / 4 / 8 rows; the C4 compressor (8M
// weights) 10.4 against 12.8 at 4 rows, 10.5 against 7.5 at 2; the gate (1M) keeps the GEMV (7.8 against 4.2 at 8).
// MOESERVE_BF16_LT_ROWS=n moves the rows from which every BF16 linear takes cuBLASLt (tests force the path with 2).
bool GpuModel::bf16_lt_preferred(int M, int N, int K) const {
  if (M > kSkinnyRows || M >= bf16_lt_rows_) return true;
  return M >= 2 && int64_t(M) * N * K >= (int64_t(32) << 20);
}

// MOESERVE_LT_SYNC diagnostic: a BF16 linear's output against a double product on the host (fp32 input, the stored
// bf16 weights), printed per call.
void GpuModel::lt_check(const GemmView& v, const float* x, int M, int ldx, const float* y, int ldy, cudaStream_t st) {
  const int N = v.N, K = v.K;
  std::vector<float> hx(size_t(M) * ldx), hy(size_t(M) * ldy);
  std::vector<uint16_t> hw(size_t(N) * K);
  cuda::copy_to_host(hx.data(), x, (size_t(M - 1) * ldx + K) * 4, st, "lt check x");
  cuda::copy_to_host(hy.data(), y, (size_t(M - 1) * ldy + N) * 4, st, "lt check y");
  cuda::copy_to_host(hw.data(), v.w, hw.size() * 2, st, "lt check w");
  double worst = 0, worst_abs = 0, scale_at = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double r = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(hx[size_t(m) * ldx + k]) * bf16_to_f32(hw[size_t(n) * K + k]);
        r += p;
        a += std::fabs(p);
      }
      const double e = std::fabs(hy[size_t(m) * ldy + n] - r);
      if (a > 0 && e / a > worst) worst = e / a, worst_abs = e, scale_at = a;
    }
  std::fprintf(stderr, "lt-check M=%d N=%d K=%d ldx=%d ldy=%d: worst |y - ref| / sum|x w| = %.3g (|err| %.3g, sum %.3g)\n",
               M, N, K, ldx, ldy, worst, worst_abs, scale_at);
}

void GpuModel::skinny_bf16_fp8w(const GemmView& w, const float* x, int M, int ldx, int problems, int N, int K,
                                int terms, float* y, int ldy, int buf) {
  cudaStream_t st = cur();
  const size_t term = size_t(M) * problems * K;
  auto* xb = static_cast<uint16_t*>(bufs_[buf].get(term * terms * 2, &generation_));
  const size_t wsn = cuda::gemm_bf16_fp8w_skinny_workspace_floats(M, N, K, problems, terms);
  auto* work = static_cast<float*>(bufs_[buf + 1].get(std::max<size_t>(wsn, 1) * 4, &generation_));
  MOESERVE_CUDA_CHECK(cuda::bf16_permute16(x, M, problems * K, ldx, xb, st, terms >= 2 ? xb + term : nullptr,
                                           terms == 3 ? xb + 2 * term : nullptr));
  MOESERVE_CUDA_CHECK(cuda::gemm_bf16_fp8w_skinny(xb, M, problems, static_cast<const uint8_t*>(w.w), w.blk_scale,
                                                  w.blk_ld, N, K, y, ldy, work, wsn, st, terms));
}

void GpuModel::linear(const GemmView& v, const float* x, int M, int ldx, float* y, int ldy, bool act_quant,
                      bool fp32_input) {
  if (M == 0 || v.N == 0) return;
  cudaStream_t st = cur();
  const bool sim = act_quant && v.act_quant && options_.numerics.act_fp8;
  const int K = v.K;
  // The activation the GEMM reads: x itself, or (checkpoint numerics) a packed copy through the FP8 simulation.
  auto input = [&](const float** xin, int* ld) {
    *xin = x;
    *ld = ldx;
    if (!sim) return;
    float* t = tmp_f32(size_t(M) * K);
    MOESERVE_CUDA_CHECK(cuda::fp8_block_sim_to(x, ldx, t, K, M, K, 128, st));
    *xin = t;
    *ld = K;
  };
  // FP8 linears of 2..64 rows whose input the model quantizes (checkpoint numerics): the tensor-core skinny GEMM
  // where it beats the GEMV and cuBLASLt (skinny_fp8_preferred); each stream quantizes into its own scratch
  // (branches run concurrently).
  if (skinny_linear_ && !options_.exact && sim && v.type == WeightType::FP8 && v.blk_scale && ldx % 4 == 0 &&
      skinny_fp8_preferred(M, v.N, K)) {
    const int side = cur_side();
    auto* xq = static_cast<uint8_t*>(bufs_[120 + side].get(size_t(M) * K, &generation_));
    auto* xs = static_cast<float*>(bufs_[130 + side].get(size_t(M) * (K / 128) * 4, &generation_));
    const size_t wsn = cuda::gemm_fp8_skinny_workspace_floats(M, v.N, K);
    auto* work = static_cast<float*>(bufs_[140 + side].get(std::max<size_t>(wsn, 1) * 4, &generation_));
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(x, M, K, ldx, xq, xs, st));
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny(xq, xs, M, M, static_cast<const uint8_t*>(v.w), v.blk_scale,
                                              v.blk_ld, v.N, K, y, ldy, work, wsn, st));
    return;
  }
  // Exact kernels, FP8 weights, 2-64 rows, reference numerics: the fp32 input as three bf16 terms (hi + lo + lo2, all
  // 24 bits) on BF16 tensor cores, the weight converted in registers (gemm_bf16_fp8w_skinny, as the grouped wo_a).
  // The products are exact as in the fp32 GEMV; only the order and grouping of the sums differ. The GEMV re-reads x
  // per row group and ran at 10-40 % of its fp32 roofline at 2-64 rows; it stays for two rows of a matrix of up to
  // 8M weights (shared w2: 6.8 against 7.5 us; docs/benchmarks/cuda-ops.md, twenty-eighth session).
  if (options_.exact && exact_skinny_ && !sim && v.type == WeightType::FP8 && v.blk_scale && M >= 2 &&
      (M > 2 || int64_t(v.N) * K > (int64_t(8) << 20)) && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      cuda::gemm_bf16_fp8w_skinny_fits(M, v.N, K)) {
    skinny_bf16_fp8w(v, x, M, ldx, 1, v.N, K, 3, y, ldy, 150 + 2 * cur_side());  // scratch per stream
    return;
  }
  // After a linear past 8 rows, when MOESERVE_LT_SYNC asks for it (outside graph capture): the stream
  // synchronized (a race probe), and a BF16 linear checked against a double product on the host (lt_check).
  auto lt_done = [&] {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (lt_sync_ && cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone) {
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(st));
      if (v.type == WeightType::BF16) lt_check(v, x, M, ldx, y, ldy, st);
    }
  };
  // Exact kernels (reference numerics): BF16 linears on cuBLASLt (bf16_lt_preferred) take the same GEMM on the
  // input's three bf16 terms (exact products, as in the fp32 GEMV, which ran at 15-24 % of its roofline past 8 rows;
  // docs/benchmarks/cuda-ops.md, twenty-eighth session).
  const bool exact_lt = options_.exact && exact_skinny_ && !sim && v.type == WeightType::BF16;
  const bool bf16_lt = v.type == WeightType::BF16 && v.N >= bf16_lt_min_n_;
  if ((!options_.exact || exact_lt) && (bf16_lt ? bf16_lt_preferred(M, v.N, K) : M > kSkinnyRows)) {
    if (bf16_lt) {
      const float* xin;
      int ld;
      input(&xin, &ld);
      // Linears on an fp32 input in the reference or the CPU engine (router gate, compressors, indexer weights,
      // head, wo_a) take x as bf16 terms (bf16_terms_: hi + lo + lo2 carry all 24 bits), so that past 8 rows they
      // stay as close to the CPU as the GEMV's fp32 input: the FP8 quantization downstream (of wo_b's input, of
      // W2's input scaled by the router weights) turns differences of 1e-6 into flipped e4m3 roundings: a test
      // model's logits moved 0.049 (bar 0.016) with wo_a's input on one term and the gate's on two, 0.014 with
      // both on two, 0.0045 on three, as on the GEMV (docs/benchmarks/cuda-ops.md, tenth session). Up to 64 rows
      // the terms are stacked as rows of one GEMM (one pass over the weight: the head's is 1 GB; gemm_bf16_terms).
      const int terms = options_.exact ? 3 : fp32_input ? bf16_terms_ : 1;
      const size_t term = size_t(M) * K;
      // Decode-sized steps run the compressors and the indexer weights concurrently on side streams: each stream
      // has its own terms, parts (bufs_[170 + 2 side] and the next one) and cuBLASLt workspace.
      const int side = cur_side();
      auto* xb = static_cast<uint16_t*>(bufs_[170 + 2 * side].get(term * terms * 2, &generation_));
      if (terms > 1)
        MOESERVE_CUDA_CHECK(
            cuda::to_bf16_split(xin, M, K, ld, xb, xb + term, st, terms == 3 ? xb + 2 * term : nullptr));
      else
        MOESERVE_CUDA_CHECK(cuda::to_bf16(xin, M, K, ld, xb, st));
      float* parts = terms > 1 && M <= cuda::Blas::kStackedRows
                         ? static_cast<float*>(bufs_[171 + 2 * side].get(size_t(terms) * M * v.N * 4, &generation_))
                         : nullptr;
      if (blas_.gemm_bf16_terms(xb, terms, static_cast<const uint16_t*>(v.w), y, M, v.N, K, ldy, parts, st,
                                side == kSides ? 0 : 1 + side)) {
        lt_done();
        return;
      }
    } else if (fp8_lt_ && v.blk_scale && K % 128 == 0 && ldx % 4 == 0) {
      // Rows cuBLASLt has no algorithm for run padded (linear_fp8_block): the GEMV below took ~3 ms a call at 769
      // rows, 5.6x a server's whole mixed step (docs/benchmarks/server.md).
      void* scratch = bufs_[102].get(blas_.linear_fp8_block_scratch(M, v.N, K, ldy), &generation_);
      if (blas_.linear_fp8_block(x, M, K, ldx, static_cast<const uint8_t*>(v.w), v.blk_scale, v.N, y, ldy, scratch,
                                 st)) {
        lt_done();
        return;
      }
    }
  }
  cuda::GemvArgs a;
  set_weights(a, v, v.N, K);
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.M = M;
  // On a side branch, room beside a wide GEMV for the critical path's one-block kernels (an nsys timeline showed
  // the kv head's rope waiting ~12 us behind a persistent wq_b on side 2).
  if (cur_) a.leave_sms = cuda::device_info().multiprocessors / 4;
  // The FP8 activation simulation rides on the skinny GEMM's loads where it can (no copy, no launch).
  a.act_fp8 = sim && cuda::gemv_fuses_act_fp8(a);
  if (sim && !a.act_fp8) input(&a.x, &a.ldx);
  MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
  if (M > kSkinnyRows && !sim) lt_done();
}

}  // namespace moeserve::model
#endif
