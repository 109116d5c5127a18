// bench_gpu_ops: every CUDA op of the forward at V4-Flash / V4-Pro decode shapes (1-64 tokens) and prefill shapes
// (4K-32K tokens), and the V4-Flash decode step per layer at batch 1, 8, 32 — time, bytes, FLOPs, and
// achieved / roofline against the running GPU's measured ceilings (bench/ceilings.json: copy bandwidth, bf16 and fp8
// dense GEMM peaks, and fp32 SIMT for the fp32 kernels; the H200's are shared/reference/h200.md's).
// Timing: each op's launches captured in a CUDA graph, replayed, cudaEvent time / launches; weights rotate over
// copies larger than the L2 so that decode-shape reads come from HBM. Usage: bench_gpu_ops [filter-substring]
// (sections: linear, chain, attention, indexer, small, moe, layer, prefill, fixture).
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph_timing.h"
#include "io/model_config.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemv_small.h"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/moe_fp8_one_token.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "engine/gpu_generate.h"
#include "model/gpu_model.h"
#include "model/model.h"

using namespace moeserve;

namespace {

// The running GPU's ceilings in bytes/s and FLOP/s (bench/ceilings.json), set first thing in main.
double roof_bw = 0, roof_bf16 = 0, roof_fp8 = 0, roof_fp32 = 0;
std::string filter;
// MOESERVE_BENCH_SHAPE=SUBSTRING: the linear section runs only the shapes containing it (scripts/device-profile.sh
// linear:SHAPE traces them with nsys).
std::string shape_filter;
cudaStream_t st;
int rows_ge8mb = 0, rows_ge8mb_ok = 0;
std::string layer_summary = "layer decode not run";

// Average microseconds per call of fn (which must only enqueue work on `st`): one eager call, then `reps` calls
// captured in a graph (graph_timing.h: one warm-up replay, 3 timed).
double time_us(const std::function<void(int)>& fn, int reps = 20) {
  fn(0);
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(st));
  return bench::graph_us_per_call(st, reps, 3, fn);
}

void report(const std::string& op, const std::string& shape, double us, double bytes, double flops, double peak,
            bool decode) {
  const double roof = std::max(bytes / roof_bw, flops / peak) * 1e6;
  const double pct = 100.0 * roof / us;
  std::printf("| %-28s | %-34s | %9.2f | %9.3f | %9.3f | %8.1f | %7.2f | %8.2f | %5.1f%% |\n", op.c_str(), shape.c_str(), us,
              bytes / 1e6, flops / 1e9, bytes / us / 1e3, flops / us / 1e6, roof, pct);
  if (decode && shape.find(" M=1 ") != std::string::npos && bytes >= 8e6) {
    ++rows_ge8mb;
    rows_ge8mb_ok += pct >= 60.0;
  }
  std::fflush(stdout);
}

bool want(const std::string& name) { return filter.empty() || name.find(filter) != std::string::npos; }

struct Pool {  // rotating copies of a buffer, >= 256 MB together (or 2 copies)
  std::vector<cuda::DeviceBuffer> copies;
  Pool(size_t bytes, int kind, float scale) {
    const size_t n = std::max<size_t>(2, std::min<size_t>(16, (size_t(256) << 20) / std::max<size_t>(bytes, 1) + 1));
    for (size_t i = 0; i < n; ++i) {
      copies.emplace_back(bytes, "bench buffer");
      const size_t elems = kind == 2 ? bytes : kind == 1 ? bytes / 2 : bytes / 4;
      MOESERVE_CUDA_CHECK(cuda::fill_uniform(copies.back().data(), elems, kind, scale, 1234 + i, st));
    }
  }
  void* get(int i) const { return copies[size_t(i) % copies.size()].data(); }
};

cuda::DeviceBuffer floats(size_t n, float scale = 1.0f) {
  cuda::DeviceBuffer b(std::max<size_t>(n, 1) * 4, "bench floats");
  MOESERVE_CUDA_CHECK(cuda::fill_uniform(b.data(), n, 0, scale, 99, st));
  return b;
}

// The floats of an N x K FP8 matrix's 128 x 128 scale grid as the engine keeps it (rows padded to 16 bytes), and its
// row stride.
int grid_ld(int K) { return ((K + 127) / 128 + 3) / 4 * 4; }
size_t grid_floats(int N, int K) { return size_t((N + 127) / 128) * grid_ld(K); }

// ---------------------------------------------------------------------------------------------- linears
void bench_linear(const std::string& model, const std::string& name, int N, int K, bool fp8, cuda::Blas& blas,
                  const std::vector<int>& Ms) {
  if (!want("linear")) return;
  const size_t wbytes = size_t(N) * K * (fp8 ? 1 : 2);
  Pool w(wbytes, fp8 ? 2 : 1, fp8 ? 448.0f : 0.02f);
  const int sld = (K + 127) / 128, bld = grid_ld(K);
  auto bs = floats(grid_floats(N, K), 1e-3f);
  // The GEMVs' FP8 scales rotate with the weight copies (from HBM, as in a decode step): the 128 x 128 grid as the
  // engine passes it where N % 128 == 0, or a copy per row (3 % of the weight bytes; gemv_small reads only these).
  const bool grid_ok = fp8 && N % 128 == 0;
  Pool row_scales(fp8 ? size_t(N) * sld * 4 : 4, 0, 1e-3f), grid_scales(grid_floats(N, K) * 4, 0, 1e-3f);
  for (int M : Ms) {
    auto x = floats(size_t(M) * K);
    auto y = floats(size_t(M) * N);
    const double bytes = double(wbytes) + double(M) * K * 4 + double(M) * N * 4;
    const double flops = 2.0 * M * N * K;
    const std::string shape = model + " " + name + " M=" + std::to_string(M) + " " + std::to_string(N) + "x" + std::to_string(K);
    if (shape.find(shape_filter) == std::string::npos) continue;
    if (M <= 64) {
      cuda::GemvArgs a;
      a.wtype = fp8 ? cuda::WeightType::FP8 : cuda::WeightType::BF16;
      a.row_scale = static_cast<const float*>(row_scales.get(0));
      a.N = N;
      a.K = K;
      a.scale_ld = sld;
      a.x = static_cast<float*>(x.data());
      a.ldx = K;
      a.y = static_cast<float*>(y.data());
      a.ldy = N;
      a.M = M;
      // us per call of run(a) over the rotated weight copies; act8: with the FP8 activation simulation fused, as
      // the model runs one-row FP8 linears under the checkpoint numerics; copies: the scales as a copy per row.
      auto time_gemv = [&](cudaError_t (*run)(const cuda::GemvArgs&, cudaStream_t), bool act8, bool copies = false) {
        a.act_fp8 = act8;
        const bool grid = grid_ok && !copies;
        a.scale_ld = grid ? bld : sld;
        a.scale_row_shift = grid ? 7 : 0;
        const double t = time_us([&](int i) {
          a.w = w.get(i);
          a.row_scale = static_cast<const float*>((grid ? grid_scales : row_scales).get(i));
          MOESERVE_CUDA_CHECK(run(a, st));
        });
        a.act_fp8 = false;
        a.row_scale = static_cast<const float*>(row_scales.get(0));  // for the fits checks below
        a.scale_ld = sld;
        a.scale_row_shift = 0;
        return t;
      };
      report(fp8 ? "gemv fp8 (exact fp32 act)" : "gemv bf16 (exact fp32 act)", shape, time_gemv(cuda::gemv, false),
             bytes, flops, roof_fp32, true);
      if (fp8 && M == 1) {
        report("gemv fp8 act8 (checkpoint)", shape, time_gemv(cuda::gemv, true), bytes, flops, roof_fp32, false);
        if (grid_ok)  // the layout the GEMVs read before the grid (an A/B in the same run)
          report("gemv fp8 (exact fp32 act, row-scale copies)", shape, time_gemv(cuda::gemv, false, true), bytes, flops,
                 roof_fp32, false);
      }
      if (cuda::gemv_stream_fits(a))  // the streaming kernel called directly (gemv() routes wide weights to it)
        report(fp8 ? "gemv_stream fp8 (direct)" : "gemv_stream bf16 (direct)", shape, time_gemv(cuda::gemv_stream, false),
               bytes, flops, roof_fp32, false);
      if (cuda::gemv_small_rows_per_block(a) > 0) {  // the one-batch kernel called directly (gemv() routes some)
        report(fp8 ? "gemv_small fp8 (direct)" : "gemv_small bf16 (direct)", shape,
               time_gemv(cuda::gemv_small, false, true), bytes, flops, roof_fp32, false);
        if (fp8)
          report("gemv_small fp8 act8 (direct)", shape, time_gemv(cuda::gemv_small, true, true), bytes, flops, roof_fp32,
                 false);
      }
      if (cuda::gemv_small_tc_rows_per_block(a) > 0) {  // its FP8 rows on tensor cores (MOESERVE_GEMV_TC=1 routes)
        report("gemv_small tc fp8 (direct)", shape, time_gemv(cuda::gemv_small_tc, false), bytes, flops, roof_fp32, false);
        report("gemv_small tc fp8 act8 (direct)", shape, time_gemv(cuda::gemv_small_tc, true), bytes, flops, roof_fp32,
               false);
      }
    }
    if (fp8 && M >= 2 && cuda::gemm_bf16_fp8w_skinny_fits(M, N, K)) {
      // The exact kernels' FP8 linear at 2-64 rows (GpuModel::linear): x as three bf16 terms on BF16 tensor cores.
      cuda::DeviceBuffer xb(size_t(3) * M * K * 2, "xb");
      const size_t wsn = cuda::gemm_bf16_fp8w_skinny_workspace_floats(M, N, K, 1, 3);
      auto work = floats(wsn);
      auto* t = static_cast<uint16_t*>(xb.data());
      const size_t term = size_t(M) * K;
      const double us = time_us([&](int i) {
        MOESERVE_CUDA_CHECK(cuda::bf16_permute16(static_cast<float*>(x.data()), M, K, K, t, st, t + term, t + 2 * term));
        MOESERVE_CUDA_CHECK(cuda::gemm_bf16_fp8w_skinny(t, M, 1, static_cast<const uint8_t*>(w.get(i)),
                                                        static_cast<float*>(bs.data()), bld, N, K,
                                                        static_cast<float*>(y.data()), N,
                                                        static_cast<float*>(work.data()), wsn, st, 3));
      });
      report("bf16x3 skinny (exact fp32 act)", shape, us, bytes, 3 * flops, roof_bf16, false);
    }
    if (fp8 && cuda::gemm_fp8_skinny_fits(M, N, K)) {  // the tensor-core skinny GEMM, with its activation quantizer
      cuda::DeviceBuffer xq(size_t(M) * K, "xq"), xs(size_t(M) * (K / 128) * 4, "xs");
      const size_t wsn = cuda::gemm_fp8_skinny_workspace_floats(M, N, K);
      auto work = floats(wsn);
      const double us = time_us([&](int i) {
        MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(static_cast<float*>(x.data()), M, K, K, static_cast<uint8_t*>(xq.data()),
                                                static_cast<float*>(xs.data()), st));
        MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny(static_cast<uint8_t*>(xq.data()), static_cast<float*>(xs.data()), M, M,
                                                  static_cast<const uint8_t*>(w.get(i)), static_cast<float*>(bs.data()),
                                                  bld, N, K, static_cast<float*>(y.data()), N,
                                                  static_cast<float*>(work.data()), wsn, st));
      });
      report("wgmma fp8 skinny (+quant)", shape, us, bytes, flops, roof_fp8, false);
    }
    if (M >= (fp8 ? 8 : 2)) {  // cuBLASLt with the activation conversion it needs
      cuda::DeviceBuffer xa(size_t(M) * K * 2, "xa"), xs(size_t(M) * (K / 128 + 1) * 4, "xs");
      bool ok = true;
      const double us = time_us([&](int i) {
        if (fp8) {
          MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(static_cast<float*>(x.data()), M, K, K, static_cast<uint8_t*>(xa.data()),
                                                  static_cast<float*>(xs.data()), st));
          ok &= blas.gemm_fp8_block(static_cast<uint8_t*>(xa.data()), static_cast<float*>(xs.data()),
                                    static_cast<const uint8_t*>(w.get(i)), static_cast<float*>(bs.data()),
                                    static_cast<float*>(y.data()), M, N, K, N, st);
        } else {
          MOESERVE_CUDA_CHECK(cuda::to_bf16(static_cast<float*>(x.data()), M, K, K, static_cast<uint16_t*>(xa.data()), st));
          ok &= blas.gemm_bf16(static_cast<uint16_t*>(xa.data()), static_cast<const uint16_t*>(w.get(i)),
                               static_cast<float*>(y.data()), M, N, K, N, st);
        }
      });
      if (ok) report(fp8 ? "cuBLASLt fp8 1x128/128x128" : "cuBLASLt bf16", shape, us, bytes, flops, fp8 ? roof_fp8 : roof_bf16, M <= 64);
      else std::printf("| %-28s | %-34s | no cuBLASLt algorithm |\n", fp8 ? "cuBLASLt fp8" : "cuBLASLt bf16", shape.c_str());
      if (!fp8) {  // as GpuModel::linear runs an fp32-input BF16 linear: three bf16 terms, stacked up to 64 rows
        cuda::DeviceBuffer terms(size_t(3) * M * K * 2, "terms"),
            parts(M <= cuda::Blas::kStackedRows ? size_t(3) * M * N * 4 : 4, "parts");
        auto* t = static_cast<uint16_t*>(terms.data());
        const size_t term = size_t(M) * K;
        auto* yp = static_cast<float*>(y.data());
        bool ok3 = true;
        const double us3 = time_us([&](int i) {
          const auto* wi = static_cast<const uint16_t*>(w.get(i));
          MOESERVE_CUDA_CHECK(cuda::to_bf16_split(static_cast<float*>(x.data()), M, K, K, t, t + term, st, t + 2 * term));
          ok3 &= blas.gemm_bf16_terms(t, 3, wi, yp, M, N, K, N, static_cast<float*>(parts.data()), st);
        });
        if (ok3) report("cuBLASLt bf16, 3 terms", shape, us3, bytes, 3 * flops, roof_bf16, false);
      }
    }
  }
}

// Weights of N x K per problem (FP8 with 128-block scales, scale_ld sld, a row of them per 2^shift weight rows: 0 a
// copy per row, 7 the 128 x 128 grid; or BF16), problems packed one after another.
void set_weights(cuda::GemvArgs& a, cuda::WeightType type, const void* w, const float* row_scale, int N, int K,
                 int sld, int shift = 0) {
  a.wtype = type;
  a.w = w;
  a.row_scale = row_scale;
  a.N = N;
  a.K = K;
  a.scale_ld = sld;
  a.scale_row_shift = shift;
  a.w_stride = (long long)N * K;
  a.scale_stride = (long long)((N + (1 << shift) - 1) >> shift) * sld;
}

// GEMV args of G problems of N x K FP8 weights (w set per launch; N % 128 == 0), each on its own K-slice of x's M
// rows and writing its own N columns of y (G = 1: one dense problem). Scales: the grid, as the engine passes it.
cuda::GemvArgs grouped_args(int G, int N, int K, const float* grid, const float* x, float* y, int M) {
  cuda::GemvArgs a = cuda::gemv_args_on_slices(G, N, K, x, y, M);
  set_weights(a, cuda::WeightType::FP8, nullptr, grid, N, K, grid_ld(K), 7);
  return a;
}

// G problems of N x K FP8 weights in one launch, each on its own K-slice of the input row and writing its own N
// columns: the grouped low-rank output projection wo_a as the engine runs it for FP8 checkpoints (GpuModel::attention).
void bench_grouped_linear(const std::string& model, const std::string& name, int G, int N, int K,
                          const std::vector<int>& Ms) {
  if (!want("linear")) return;
  const size_t wbytes = size_t(G) * N * K;
  Pool w(wbytes, 2, 448.0f), grids(size_t(G) * grid_floats(N, K) * 4, 0, 1e-3f);  // the grids rotate with w
  for (int M : Ms) {
    auto x = floats(size_t(M) * G * K);
    auto y = floats(size_t(M) * G * N);
    const double bytes = double(wbytes) + double(M) * G * K * 4 + double(M) * G * N * 4;
    const double flops = 2.0 * M * G * double(N) * K;
    const std::string shape = model + " " + name + " M=" + std::to_string(M) + " " + std::to_string(G) + "x" +
                              std::to_string(N) + "x" + std::to_string(K);
    if (shape.find(shape_filter) == std::string::npos) continue;
    cuda::GemvArgs a = grouped_args(G, N, K, nullptr, static_cast<float*>(x.data()), static_cast<float*>(y.data()),
                                    M);  // w and its scales rotate below
    const double us = time_us([&](int i) {
      a.w = w.get(i);
      a.row_scale = static_cast<const float*>(grids.get(i));
      MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
    });
    report("gemv fp8 grouped (fp32 act)", shape, us, bytes, flops, roof_fp32, true);
    if (cuda::gemm_bf16_fp8w_skinny_fits(M, N, K)) {  // BF16 tensor cores, with the activations' bf16 conversion
      const int bld = grid_ld(K);
      auto bs = floats(size_t(G) * grid_floats(N, K), 1e-3f);
      cuda::DeviceBuffer xb(size_t(M) * G * K * 2, "xb");
      const size_t wsn = cuda::gemm_bf16_fp8w_skinny_workspace_floats(M, N, K, G);
      auto work = floats(wsn);
      const double us_tc = time_us([&](int i) {
        MOESERVE_CUDA_CHECK(cuda::bf16_permute16(static_cast<float*>(x.data()), M, G * K, G * K,
                                                 static_cast<uint16_t*>(xb.data()), st));
        MOESERVE_CUDA_CHECK(cuda::gemm_bf16_fp8w_skinny(static_cast<uint16_t*>(xb.data()), M, G,
                                                        static_cast<const uint8_t*>(w.get(i)),
                                                        static_cast<float*>(bs.data()), bld, N, K,
                                                        static_cast<float*>(y.data()), G * N,
                                                        static_cast<float*>(work.data()), wsn, st));
      });
      report("wgmma bf16 x fp8w skinny (+cvt)", shape, us_tc, bytes, flops, roof_bf16, false);
      // The engine's form: the fp32 input as three bf16 terms (hi, lo, lo2 rows) summed in the split epilogue.
      cuda::DeviceBuffer xb3(size_t(3) * M * G * K * 2, "xb three terms");
      const size_t wsn3 = cuda::gemm_bf16_fp8w_skinny_workspace_floats(M, N, K, G, 3);
      auto work3 = floats(wsn3);
      auto* hi = static_cast<uint16_t*>(xb3.data());
      const size_t term = size_t(M) * G * K;
      const double us_three = time_us([&](int i) {
        MOESERVE_CUDA_CHECK(cuda::bf16_permute16(static_cast<float*>(x.data()), M, G * K, G * K, hi, st, hi + term,
                                                 hi + 2 * term));
        MOESERVE_CUDA_CHECK(cuda::gemm_bf16_fp8w_skinny(hi, M, G, static_cast<const uint8_t*>(w.get(i)),
                                                        static_cast<float*>(bs.data()), bld, N, K,
                                                        static_cast<float*>(y.data()), G * N,
                                                        static_cast<float*>(work3.data()), wsn3, st, 3));
      });
      report("wgmma bf16 x fp8w skinny, 3 terms (+cvt)", shape, us_three, bytes, 3 * flops, roof_bf16, false);
    }
  }
}

// ------------------------------------------------------------------------------------ one-row GEMV chains
// Two FP8 GEMVs back to back, the second reading the first's output (as the layer runs wo_a -> wo_b), timed as a
// graph of pairs against each timed alone in the same run: whether a GEMV keeps its standalone rate when the
// kernel before it is a different one. (In the batch-1 layer the large reads run 2-4 us slower each than alone:
// docs/benchmarks/cuda-ops.md, seventeenth session.) Bench section "chain"; MOESERVE_BENCH_SHAPE filters by name.
struct GemvSpec {
  int G, N, K;  // G problems of N x K, each on its own K-slice of x and writing its own N outputs (G = 1: dense)
};
void bench_gemv_chain(const std::string& name, GemvSpec a, GemvSpec b) {
  if (!want("chain") || name.find(shape_filter) == std::string::npos) return;
  Pool wa(size_t(a.G) * a.N * a.K, 2, 448.0f), wb(size_t(b.G) * b.N * b.K, 2, 448.0f);
  auto rsa = floats(size_t(a.G) * grid_floats(a.N, a.K), 1e-3f);  // the scale grids
  auto rsb = floats(size_t(b.G) * grid_floats(b.N, b.K), 1e-3f);
  auto x = floats(size_t(a.G) * a.K);
  auto mid = floats(std::max(size_t(a.G) * a.N, size_t(b.G) * b.K));  // a's output, b's input
  auto y = floats(size_t(b.G) * b.N);
  auto args = [&](GemvSpec g, const cuda::DeviceBuffer& rs, cuda::DeviceBuffer& in, cuda::DeviceBuffer& out) {
    return grouped_args(g.G, g.N, g.K, static_cast<float*>(rs.data()), static_cast<float*>(in.data()),
                        static_cast<float*>(out.data()), 1);
  };
  cuda::GemvArgs ga = args(a, rsa, x, mid), gb = args(b, rsb, mid, y);
  const double bytes_a = double(a.G) * a.N * a.K, bytes_b = double(b.G) * b.N * b.K;
  const double us_a = time_us([&](int i) {
    ga.w = wa.get(i);
    MOESERVE_CUDA_CHECK(cuda::gemv(ga, st));
  });
  const double us_b = time_us([&](int i) {
    gb.w = wb.get(i);
    MOESERVE_CUDA_CHECK(cuda::gemv(gb, st));
  });
  const double us_pair = time_us([&](int i) {
    ga.w = wa.get(i);
    MOESERVE_CUDA_CHECK(cuda::gemv(ga, st));
    gb.w = wb.get(i);
    MOESERVE_CUDA_CHECK(cuda::gemv(gb, st));
  });
  report("gemv chain: first alone", name, us_a, bytes_a, 2 * bytes_a, roof_fp32, false);
  report("gemv chain: second alone", name, us_b, bytes_b, 2 * bytes_b, roof_fp32, false);
  report("gemv chain: the pair", name, us_pair, bytes_a + bytes_b, 2 * (bytes_a + bytes_b), roof_fp32, false);
  std::printf("gemv chain %s: pair %.2f us = alone %.2f + %.2f %+.2f us\n", name.c_str(), us_pair, us_a, us_b,
              us_pair - us_a - us_b);
}

// ---------------------------------------------------------------------------------------- attention side
struct Batch {
  cuda::DeviceArray<int> meta;
  cuda::BatchDesc b;
  // T tokens of S sequences, each with `count` tokens ending at position `last`; pages identity per sequence.
  Batch(int S, int count, int last, int pages_per_seq) {
    const int T = S * count;
    std::vector<int> m;
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < count; ++i) m.push_back(last - count + 1 + i);
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < count; ++i) m.push_back(s);
    for (int t = 0; t < T; ++t) m.push_back(t % 1000);
    for (int s = 0; s < S; ++s) m.push_back(s * count);
    for (int s = 0; s < S; ++s) m.push_back(last - count + 1);
    for (int s = 0; s < S; ++s) m.push_back(count);
    for (int s = 0; s < S; ++s) m.push_back(s);
    for (int s = 0; s < S; ++s)
      for (int p = 0; p < pages_per_seq; ++p) m.push_back(s * pages_per_seq + p);
    meta = cuda::DeviceArray<int>::from(std::span<const int>(m), "bench meta");
    const int* d = meta.data();
    b.T = T;
    b.S = S;
    b.tok_pos = d;
    b.tok_seq = d + T;
    b.tok_id = d + 2 * T;
    b.seq_begin = d + 3 * T;
    b.seq_start = b.seq_begin + S;
    b.seq_count = b.seq_start + S;
    b.seq_slot = b.seq_count + S;
    b.page_table = b.seq_slot + S;
    b.page_ld = pages_per_seq;
  }
};

void bench_attention(const std::string& model, int H, int S, int count, int ctx, int ratio, bool indexed, int topk) {
  // "attention-pf": only the prefill rows (for profiles; a name that the filter "prefill" does not select).
  if (!want("attention") && !(count > 1 && want("attention-pf"))) return;
  const int hd = 512, W = 128, T = S * count, epp = ratio ? 256 / ratio : 1;
  const int pages = (ctx + 255) / 256 + 1;
  Batch bt(S, count, ctx - 1, pages);
  auto q = floats(size_t(T) * H * hd), kv = floats(size_t(T) * hd), o = floats(size_t(T) * H * hd);
  auto window = floats(size_t(S) * W * hd);
  auto comp = floats(size_t(S) * pages * epp * hd);
  auto sinks = floats(size_t(H));
  auto inv = floats(32, 0.5f);
  // Each token's top-k: distinct entries it may see (pos + 1) / ratio of, spread as a permutation (7919 is prime),
  // each token's from its own offset.
  std::vector<int> top(size_t(T) * std::max(topk, 1));
  for (int t = 0; t < T && topk > 0; ++t) {
    const int valid = std::max(1, (ctx - count + t % count + 1) / std::max(ratio, 1));
    for (int j = 0; j < topk; ++j)
      top[size_t(t) * topk + j] = int((size_t(j) * 7919 + size_t(t) * 104729) % size_t(valid));
  }
  auto dtop = cuda::DeviceArray<int>::from(std::span<const int>(top), "top");
  cuda::AttentionArgs a;
  a.q = static_cast<float*>(q.data());
  a.kv = static_cast<float*>(kv.data());
  a.view.window = static_cast<float*>(window.data());
  a.view.num_layers = 1;
  a.view.cap = W;
  a.view.hd = hd;
  a.view.compressed = static_cast<float*>(comp.data());
  a.view.epp = epp;
  a.H = H;
  a.hd = hd;
  a.window = W;
  a.ratio = ratio;
  a.topk = indexed ? dtop.data() : nullptr;
  a.k = topk;
  const int ncomp = ratio ? (indexed ? std::min(topk, ctx / ratio) : ctx / ratio) : 0;
  a.max_keys = W + ncomp;
  a.sinks = static_cast<float*>(sinks.data());
  a.scale = 0.044f;
  a.inv_freq = static_cast<float*>(inv.data());
  a.rope_dim = 64;
  a.splits = cuda::attention_splits(T, H, a.max_keys);
  auto part = floats(std::max<size_t>(1, cuda::attention_workspace_floats(T, H, hd, a.splits)));
  a.partial = static_cast<float*>(part.data());
  a.o = static_cast<float*>(o.data());
  const double us = time_us([&](int) { MOESERVE_CUDA_CHECK(cuda::sparse_attention(bt.b, a, st)); }, count > 64 ? 2 : 20);
  const double keys = double(W + ncomp);  // per token (upper bound in prefill)
  const double bytes = double(S) * (W + ncomp) * hd * 4 + double(T) * H * hd * 8;
  const double flops = double(T) * H * keys * hd * 4;
  const std::string kind = ratio == 0 ? "window" : indexed ? "C4 top-" + std::to_string(topk) : "C128";
  const std::string shape = model + " T=" + std::to_string(T) + (count == 1 ? " M=" + std::to_string(S) + " " : " ") + "ctx " + std::to_string(ctx);
  report("attention fp32 (" + kind + ")", shape, us, bytes, flops, roof_fp32, count == 1);
  if (count == 1 && a.splits > 1) {  // the key splits adding themselves up, as GpuModel's decode steps run it
    cuda::DeviceArray<int> arrivals(size_t(T) * H / 4, "arrivals");
    arrivals.fill_bytes(0);
    cuda::AttentionArgs self = a;
    self.arrivals = arrivals.data();
    self.arrival_slots = int(arrivals.size());
    const double us_self = time_us([&](int) { MOESERVE_CUDA_CHECK(cuda::sparse_attention(bt.b, self, st)); }, 20);
    report("attention fp32, splits self-combined (" + kind + ")", shape, us_self, bytes, flops, roof_fp32, false);
  }
  // The tensor-core kernel (FP8-simulated keys under the checkpoint numerics): the queries, rope dims and
  // probabilities in three bf16 terms make its tensor work 3.75x the FLOPs above ((448 * 3 + 64 * 9) / 512), which
  // is what the bf16 ceiling is held against.
  const double us_mma = time_us([&](int) { MOESERVE_CUDA_CHECK(cuda::sparse_attention_mma(bt.b, a, st)); }, count > 64 ? 2 : 20);
  report("attention bf16x3 mma (" + kind + ")", shape, us_mma, bytes, flops * 3.75, roof_bf16, false);
  if (count > 1) {  // prefill: with the keys converted once into a key image (as GpuModel runs prefill steps)
    a.image_comp = ratio ? ctx / ratio : 0;
    cuda::DeviceBuffer image(cuda::attention_key_image_elems(T, S, W, a.image_comp) * 2, "key image");
    a.key_image = static_cast<uint16_t*>(image.data());
    const double us_image = time_us([&](int) { MOESERVE_CUDA_CHECK(cuda::sparse_attention_mma(bt.b, a, st)); }, 2);
    report("attention bf16x3 mma, key image (" + kind + ")", shape, us_image, bytes, flops * 3.75, roof_bf16, false);
  }
}

void bench_indexer(const std::string& model, int S, int count, int ctx, int k) {
  if (!want("indexer")) return;
  const int heads = 64, dim = 128, ratio = 4, epp = 64, T = S * count, pages = (ctx + 255) / 256 + 1;
  const int nc = ctx / ratio;
  Batch bt(S, count, ctx - 1, pages);
  auto q = floats(size_t(T) * heads * dim), w = floats(size_t(T) * heads), keys = floats(size_t(S) * pages * epp * dim);
  auto scores = floats(size_t(T) * nc);
  cuda::DeviceArray<int> idx(size_t(T) * k, "idx");
  const double us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::indexer_scores(bt.b, static_cast<float*>(q.data()), static_cast<float*>(w.data()), heads, dim,
                                             static_cast<float*>(keys.data()), epp, ratio, 0.088f, nc,
                                             static_cast<float*>(scores.data()), nc, st));
  }, count > 64 ? 2 : 20);
  const double bytes = double(S) * nc * dim * 4 + double(T) * nc * 4, flops = 2.0 * T * nc * heads * dim;
  const std::string shape =
      model + " T=" + std::to_string(T) + (count == 1 ? " M=" + std::to_string(S) + " " : " ") + "ctx " + std::to_string(ctx);
  report("indexer scores fp32", shape, us, bytes, flops, roof_fp32, count == 1);
  // The tensor-core path the engine takes under the checkpoint numerics (FP4-simulated queries and keys; the random
  // fp32 inputs here are rounded to bf16, which changes nothing in the timing).
  const double us_bf16 = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::indexer_scores_bf16(bt.b, static_cast<float*>(q.data()), static_cast<float*>(w.data()), heads,
                                                  dim, static_cast<float*>(keys.data()), epp, ratio, 0.088f, nc,
                                                  static_cast<float*>(scores.data()), nc, st));
  }, count > 64 ? 2 : 20);
  report("indexer scores bf16 mma", shape, us_bf16, bytes, flops, roof_bf16, false);
  const double us2 = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::indexer_topk(bt.b, static_cast<float*>(scores.data()), nc, ratio, k, idx.data(), st));
  }, count > 64 ? 2 : 20);
  report("indexer top-" + std::to_string(k), model + " T=" + std::to_string(T) + " of " + std::to_string(nc), us2, double(T) * nc * 4 * 6,
         0, roof_fp32, false);
}

// Next-token sampling (cuda::sample_rows): greedy, temperature alone (the OpenAI default of 1), with top-p, and
// with top-k and top-p, over V4's vocabulary at 1 and 32 rows and over the demo model's (8192) at 16 rows,
// launching the phases the settings need (as the engine does). A row is up to 32 slices of one block each, a
// kernel per phase: the figure is mostly the phases' launch boundaries and memory round trips; bytes count one
// read of the logits. Timed in a graph (the server with decode graphs) and launched one by one (eager: the
// server with --disable-cuda-graph, or generate).
void bench_sampling() {
  if (!want("small")) return;
  struct Mode { const char* name; float temperature, top_p; int top_k; };
  struct Shape { int vocab, rows; };
  for (Shape sh : {Shape{129280, 1}, Shape{129280, 32}, Shape{8192, 16}}) {
    const int vocab = sh.vocab, rows = sh.rows;
    auto logits = floats(size_t(rows) * vocab, 8.0f);
    cuda::DeviceBuffer work(cuda::sample_work_bytes(rows, vocab), "bench sample work");
    cuda::DeviceArray<int> tokens(size_t(rows), "bench tokens");
    for (Mode m : {Mode{"greedy", 0.0f, 1.0f, 0}, Mode{"T 1.0", 1.0f, 1.0f, 0}, Mode{"T 0.7, top-p 0.95", 0.7f, 0.95f, 0},
                   Mode{"T 0.7, top-k 50, top-p 0.95", 0.7f, 0.95f, 50}}) {
      std::vector<cuda::SampleRow> ph(static_cast<size_t>(rows));
      for (auto& p : ph) {
        p.u = 0.5;
        p.temperature = m.temperature;
        p.top_p = m.top_p;
        p.top_k = m.top_k;
      }
      auto params = cuda::DeviceArray<cuda::SampleRow>::from(std::span<const cuda::SampleRow>(ph), "bench rows");
      auto call = [&] {
        MOESERVE_CUDA_CHECK(cuda::sample_rows(static_cast<float*>(logits.data()), rows, vocab, params.data(),
                                              tokens.data(), nullptr, work.data(), st,
                                              cuda::sample_steps(ph.data(), ph.size())));
      };
      const double us = time_us([&](int) { call(); });
      const int calls = 20;
      const double eager = 1000.0 * bench::elapsed_ms(st, [&] {
        for (int i = 0; i < calls; ++i) call();
      }) / calls;
      const std::string shape = "vocab " + std::to_string(vocab) + " rows " + std::to_string(rows);
      report(std::string("sample ") + m.name, shape, us, double(rows) * vocab * 4, 0, roof_fp32, false);
      report(std::string("sample ") + m.name, shape + " eager", eager, double(rows) * vocab * 4, 0, roof_fp32, false);
    }
  }
}

void bench_small_ops(const std::string& model, int D, int T) {
  if (!want("small")) return;
  const int hc = 4, mix = 24, width = hc * D, splits = cuda::hc_mix_splits(width, T);
  auto h = floats(size_t(T) * width), fn = floats(size_t(mix) * width, 0.01f), base = floats(mix), scale = floats(3);
  auto nw = floats(D), col = floats(size_t(T) * D), post = floats(size_t(T) * hc), comb = floats(size_t(T) * 16);
  auto part = floats(size_t(splits) * T * (mix + 1));
  const std::string sh = model + " T=" + std::to_string(T) + (T <= 64 ? " M=" + std::to_string(T) + " " : " ");
  const bool dec = T <= 64;
  double us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(static_cast<float*>(h.data()), T, width, static_cast<float*>(fn.data()), mix,
                                             splits, static_cast<float*>(part.data()), st));
    MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(static_cast<float*>(part.data()), splits, static_cast<float*>(h.data()), T, hc,
                                            D, mix, static_cast<float*>(base.data()), static_cast<float*>(scale.data()), 20,
                                            1e-6f, 1e-6f, static_cast<float*>(nw.data()), static_cast<float*>(col.data()),
                                            static_cast<float*>(post.data()), static_cast<float*>(comb.data()), st));
  }, T > 64 ? 3 : 20);
  report("hc_pre (mix+sinkhorn+norm)", sh, us, double(T) * width * 4 * 2 + double(mix) * width * 4 + double(T) * D * 4,
         2.0 * T * width * mix, roof_fp32, dec);
  us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::hc_post(static_cast<float*>(h.data()), T, hc, D, static_cast<float*>(col.data()),
                                      static_cast<float*>(post.data()), static_cast<float*>(comb.data()), st));
  }, T > 64 ? 3 : 20);
  report("hc_post", sh, us, double(T) * width * 8 + double(T) * D * 4, double(T) * width * 10, roof_fp32, dec);
  us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::rms_norm(static_cast<float*>(col.data()), T, D, D, static_cast<float*>(nw.data()), 1e-6f,
                                       static_cast<float*>(col.data()), D, st));
  }, T > 64 ? 3 : 20);
  report("rms_norm", sh, us, double(T) * D * 8, double(T) * D * 3, roof_fp32, dec);
  const int H = D == 4096 ? 64 : 128;
  auto q = floats(size_t(T) * H * 512), inv = floats(32, 0.5f);
  std::vector<int> pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) pos[size_t(t)] = 1000 + t;
  auto dpos = cuda::DeviceArray<int>::from(std::span<const int>(pos), "pos");
  us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::rope(static_cast<float*>(q.data()), T, H, 512, H * 512, 64, dpos.data(),
                                   static_cast<float*>(inv.data()), 1.0f, false, 1e-6f, st));
  }, T > 64 ? 3 : 20);
  report("q head-norm + rope", sh, us, double(T) * H * 512 * 8, double(T) * H * 512 * 4, roof_fp32, dec);
  // The router's choice and the grouping of the slots, as the FP8 / BF16 experts' chain runs them before W13: one
  // block each, latency-bound (bytes: the logits and bias in, the slots' choice, weight and rows out).
  const int E = D == 4096 ? 256 : 384, K = 6, TK = T * K;
  auto logits = floats(size_t(T) * E), bias = floats(E, 0.01f), wts = floats(TK), wor = floats(TK);
  cuda::DeviceArray<int> ids(size_t(T), "ids"), chosen(size_t(TK), "c"), groups(size_t(3 * E + 1), "g"),
      ros(size_t(TK), "r"), tor(size_t(TK), "t");
  ids.fill_bytes(0);
  us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::moe_route(static_cast<float*>(logits.data()), T, E, K, 0, static_cast<float*>(bias.data()),
                                        nullptr, ids.data(), true, 1.5f, chosen.data(), static_cast<float*>(wts.data()), st));
  }, T > 64 ? 3 : 20);
  report("moe_route (sqrtsoftplus top-6)", sh, us, double(T) * E * 4 + E * 4.0 + TK * 8.0, double(T) * E * 20, roof_fp32, dec);
  int* ge = groups.data();
  us = time_us([&](int) {
    MOESERVE_CUDA_CHECK(cuda::moe_group(chosen.data(), static_cast<float*>(wts.data()), T, K, E, nullptr, ge, ge + E,
                                        ge + 2 * E, ge + 3 * E, ros.data(), tor.data(), static_cast<float*>(wor.data()), st));
  }, T > 64 ? 3 : 20);
  report("moe_group", sh, us, TK * 8.0 + TK * 12.0 + E * 12.0, double(TK) + E, roof_fp32, dec);
}

// Distinct experts hit by T tokens x K of E (uniform routing; the benches' logits are random): E (1 - (1 - K/E)^T).
double experts_hit(int E, int K, int T) { return E * (1.0 - std::pow(1.0 - double(K) / E, T)); }

void bench_moe(const std::string& model, int E, int D, int I, int T, bool fp8) {
  if (!want("moe")) return;
  const int K = 6, TK = T * K;
  const size_t w13 = size_t(2) * I * D * (fp8 ? 1 : 2), w2 = size_t(D) * I * (fp8 ? 1 : 2);
  cuda::DeviceBuffer W13(w13 * E, "w13"), W2(w2 * E, "w2");
  MOESERVE_CUDA_CHECK(cuda::fill_uniform(W13.data(), w13 * E / (fp8 ? 1 : 2), fp8 ? 2 : 1, fp8 ? 448.f : 0.02f, 5, st));
  MOESERVE_CUDA_CHECK(cuda::fill_uniform(W2.data(), w2 * E / (fp8 ? 1 : 2), fp8 ? 2 : 1, fp8 ? 448.f : 0.02f, 6, st));
  // FP8 scales as the engine passes them: the 128 x 128 grid, rows padded to 16 bytes.
  const int bld1 = grid_ld(D), bld2 = grid_ld(I);
  const size_t grid1 = grid_floats(2 * I, D), grid2 = grid_floats(D, I);  // floats per expert
  auto bs1 = floats(size_t(E) * grid1, 1e-3f), bs2 = floats(size_t(E) * grid2, 1e-3f);
  auto logits = floats(size_t(T) * E), bias = floats(E, 0.01f), x = floats(size_t(T) * D);
  cuda::DeviceArray<int> ids(size_t(T), "ids"), chosen(size_t(TK), "c"), groups(size_t(3 * E + 1), "g"), ros(size_t(TK), "r"),
      tor(size_t(TK), "t");
  auto wts = floats(TK), wor = floats(TK), h13 = floats(size_t(TK) * 2 * I), act = floats(size_t(TK) * I), y = floats(size_t(TK) * D),
       out = floats(size_t(T) * D);
  ids.fill_bytes(0);
  int* ge = groups.data();
  // The router's choice, the grouping, the combine: as every row below runs them.
  auto route = [&] {
    MOESERVE_CUDA_CHECK(cuda::moe_route(static_cast<float*>(logits.data()), T, E, K, 0, static_cast<float*>(bias.data()),
                                        nullptr, ids.data(), true, 1.5f, chosen.data(), static_cast<float*>(wts.data()), st));
  };
  auto group = [&] {
    MOESERVE_CUDA_CHECK(cuda::moe_group(chosen.data(), static_cast<float*>(wts.data()), T, K, E, nullptr, ge, ge + E,
                                        ge + 2 * E, ge + 3 * E, ros.data(), tor.data(), static_cast<float*>(wor.data()), st));
  };
  auto combine = [&](float* rows) {
    MOESERVE_CUDA_CHECK(cuda::moe_combine(rows, D, ros.data(), T, K, static_cast<float*>(out.data()), st));
  };
  auto step = [&](int) {
    route();
    group();
    cuda::GemvArgs a;
    const cuda::WeightType type = fp8 ? cuda::WeightType::FP8 : cuda::WeightType::BF16;
    set_weights(a, type, W13.data(), static_cast<float*>(bs1.data()), 2 * I, D, bld1, 7);
    a.x = static_cast<float*>(x.data());
    a.ldx = D;
    a.y = static_cast<float*>(h13.data());
    a.ldy = 2 * I;
    a.problems = std::min(E, TK);
    a.group_expert = ge;
    a.group_offset = ge + E;
    a.group_count = ge + 2 * E;
    a.num_groups = ge + 3 * E;
    a.x_rows = tor.data();
    a.max_group_rows = T;
    MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
    MOESERVE_CUDA_CHECK(cuda::swiglu(static_cast<float*>(h13.data()), TK, nullptr, I, 10.0f, static_cast<float*>(wor.data()),
                                     static_cast<float*>(act.data()), st));
    cuda::GemvArgs b = a;
    set_weights(b, type, W2.data(), static_cast<float*>(bs2.data()), D, I, bld2, 7);
    b.x = static_cast<float*>(act.data());
    b.ldx = I;
    b.y = static_cast<float*>(y.data());
    b.ldy = D;
    b.x_rows = nullptr;
    MOESERVE_CUDA_CHECK(cuda::gemv(b, st));
    combine(static_cast<float*>(y.data()));
  };
  const double us = time_us(step, 10);
  const double active = experts_hit(E, K, T);
  const double bytes = active * double(w13 + w2) + double(TK) * (2 * I + I + D) * 4 * 2;
  const std::string shape = model + " M=" + std::to_string(T) + " E=" + std::to_string(E);
  report(std::string("MoE routed ") + (fp8 ? "fp8" : "bf16") + " (route+group+2 gemv)", shape, us, bytes,
         2.0 * TK * 3 * I * D, roof_fp32, true);
  if (fp8 && T == 1) {
    // Route, the one-launch experts (W13, SwiGLU and W2 of every slot), combine: exact activations as the row
    // above, then the checkpoint numerics' FP8 activation simulation. Not the engine's default (GpuModel::moe,
    // MOESERVE_MOE_ONE_LAUNCH=1), so not counted against the bar.
    cuda::DeviceArray<uint32_t> barrier(2, "barrier");
    barrier.fill_bytes(0, st);
    cuda::MoeFp8OneTokenArgs f;
    f.w13 = {W13.data(), static_cast<float*>(bs1.data()), bld1, 7, (long long)w13, (long long)grid1};
    f.w2 = {W2.data(), static_cast<float*>(bs2.data()), bld2, 7, (long long)w2, (long long)grid2};
    f.D = D;
    f.I = I;
    f.K = K;
    f.x = static_cast<float*>(x.data());
    f.chosen = chosen.data();
    f.weight = static_cast<float*>(wts.data());
    f.limit = 10.0f;
    f.act = static_cast<float*>(act.data());
    f.y = static_cast<float*>(y.data());
    f.row_of_slot = ros.data();
    f.barrier = barrier.data();
    for (bool act8 : {false, true}) {
      f.act_fp8 = act8;
      const double us1 = time_us([&](int) {
        route();
        MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, st));
        combine(static_cast<float*>(y.data()));
      }, 10);
      report(act8 ? "MoE routed fp8 (route+1 launch+combine) act8" : "MoE routed fp8 (route+1 launch+combine)", shape,
             us1, bytes, 2.0 * TK * 3 * I * D, roof_fp32, false);
    }
    // The same with the shared expert as one more slot (MOESERVE_MOE_ONE_LAUNCH=shared; its weights: a different
    // expert of the stacks per launch, so they come from HBM as the engine's would). Bytes and FLOPs include the
    // shared expert's.
    const double shared_bytes = bytes + double(w13 + w2) + double(3 * I + D) * 4 * 2;
    const double shared_flops = 2.0 * (TK + 1) * 3 * I * D;
    auto set_shared = [&](int i) {
      const int e = (i * 37 + 11) % E;
      f.shared_w13 = {static_cast<uint8_t*>(W13.data()) + size_t(e) * w13,
                      static_cast<float*>(bs1.data()) + size_t(e) * grid1, bld1, 7, 0, 0};
      f.shared_w2 = {static_cast<uint8_t*>(W2.data()) + size_t(e) * w2, static_cast<float*>(bs2.data()) + size_t(e) * grid2,
                     bld2, 7, 0, 0};
      f.shared_out = static_cast<float*>(out.data());
    };
    f.act_fp8 = true;
    const double us_sh = time_us([&](int i) {
      route();
      set_shared(i);
      MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, st));
      combine(static_cast<float*>(y.data()));
    }, 10);
    report("MoE fp8 routed+shared (route+1 launch+combine) act8", shape, us_sh, shared_bytes, shared_flops, roof_fp32, false);
  }
  if (!fp8 || !cuda::gemm_fp8_skinny_fits(T, 2 * I, D)) return;
  // As the engine runs FP8 experts at up to 64 rows each in checkpoint numerics: gather, quantize, the grouped
  // tensor-core skinny GEMM, SwiGLU, quantize, the grouped skinny GEMM, combine.
  cuda::DeviceBuffer xq(size_t(TK) * std::max(D, I), "xq"), xs(size_t(TK) * (std::max(D, I) / 128) * 4, "xs");
  auto* q = static_cast<uint8_t*>(xq.data());
  auto* qs = static_cast<float*>(xs.data());
  auto* ye = static_cast<float*>(y.data());
  const double us_tc = time_us([&](int) {
    route();
    group();
    MOESERVE_CUDA_CHECK(cuda::gather_rows(static_cast<float*>(x.data()), D, tor.data(), TK, ye, st));
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(ye, TK, D, D, q, qs, st));
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny_grouped(q, qs, TK, TK, T, static_cast<const uint8_t*>(W13.data()),
                                                      static_cast<float*>(bs1.data()), bld1, grid1,
                                                      E, 2 * I, D, ge, ge + E, ge + 2 * E, ge + 3 * E, std::min(E, TK),
                                                      static_cast<float*>(h13.data()), 2 * I, st));
    MOESERVE_CUDA_CHECK(cuda::swiglu(static_cast<float*>(h13.data()), TK, nullptr, I, 10.0f,
                                     static_cast<float*>(wor.data()), static_cast<float*>(act.data()), st));
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(static_cast<float*>(act.data()), TK, I, I, q, qs, st));
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny_grouped(q, qs, TK, TK, T, static_cast<const uint8_t*>(W2.data()),
                                                      static_cast<float*>(bs2.data()), bld2, grid2, E,
                                                      D, I, ge, ge + E, ge + 2 * E, ge + 3 * E, std::min(E, TK), ye, D,
                                                      st));
    combine(ye);
  }, 10);
  report("MoE routed fp8 (skinny wgmma, grouped)", shape, us_tc, bytes, 2.0 * TK * 3 * I * D, roof_fp8, false);
}

// The routed experts kept MXFP4, as GpuModel::moe_mxfp4 runs them in a decode step (TK <= 256 slots): the router's
// choice, routing rows + gather + FP8 quant, W13 counting the settled ids (W2's first stages asked of L2), SwiGLU +
// quant, W2 with settled counts, the combine. Twice: W2 launched while SwiGLU waits (the engine's default past one
// token) and after SwiGLU's wait (its one-token order, where the shared expert's side stream needs W13's freed SMs;
// here there is no shared expert). Bytes: the touched experts' packed weights (e2m1, scales, row references) and
// the activations. Issue 8 measures the GEMMs alone (bench_gpu_moe_w4a8); these rows are what the engine's chain
// gets. Not counted against issue 7's ops (its MoE is BF16 / FP8).
void bench_moe_mxfp4(const std::string& model, int E, int D, int I, int T) {
  if (!want("moe")) return;
  const int K = 6, TK = T * K, sa_ld = (TK + 3) / 4 * 4;
  if (TK > cuda::moe_route_gather_max_slots()) return;
  const model::GpuMxfp4Experts ex = model::GpuMxfp4Experts::random(E, D, I, 7, st, "bench mxfp4 experts");
  const cuda::MoeW4A8Weights w13 = ex.w13_view(), w2 = ex.w2_view();
  // Routings rotate over replays (different logits), so that the touched experts differ from one replay to the next.
  constexpr int kRoutings = 8;
  std::vector<cuda::DeviceBuffer> logits;
  for (int r = 0; r < kRoutings; ++r) {
    logits.emplace_back(size_t(T) * E * 4, "bench logits");
    MOESERVE_CUDA_CHECK(cuda::fill_uniform(logits.back().data(), size_t(T) * E, 0, 1.0f, 500 + r, st));
  }
  auto bias = floats(E, 0.01f), x = floats(size_t(T) * D), wts = floats(TK), h13 = floats(size_t(TK) * 2 * I),
       y = floats(size_t(TK) * D), out = floats(size_t(T) * D), sa = floats(size_t(std::max(D, I) / 128) * sa_ld);
  cuda::DeviceArray<int> ids(size_t(T), "ids"), chosen(size_t(TK), "c"), counts(size_t(E), "n"), ros(size_t(TK), "r"),
      sor(size_t(TK), "s"), counter(1, "item counter");
  cuda::DeviceBuffer a(size_t(TK) * std::max(D, I), "a");
  ids.fill_bytes(0);
  counter.fill_bytes(0);
  auto* af = static_cast<uint8_t*>(a.data());
  auto* saf = static_cast<float*>(sa.data());
  // Activations: x and out once, the FP8 rows, h13 and the W2 rows written and read once each.
  const double bytes = experts_hit(E, K, T) * double(ex.w13.bytes() + ex.w2.bytes()) / E + 2.0 * T * D * 4 +
                       2.0 * TK * (D + 2 * I * 4 + I + D * 4);
  const std::string shape = model + " M=" + std::to_string(T) + " E=" + std::to_string(E);
  for (const cuda::MoeW4A8Weights* w : {&w13, &w2}) {
    const int cfg = cuda::moe_w4a8_pick_config(E, w->N, w->K, TK);
    const cuda::MoeW4A8Split sp = cuda::moe_w4a8_pick_split(E, w->N, w->K, TK);
    std::printf("# %s %s: %s%s%s\n", shape.c_str(), w == &w13 ? "W13" : "W2", cuda::moe_w4a8_config(cfg).name,
                sp.config >= 0 ? " + split " : "", sp.config >= 0 ? cuda::moe_w4a8_config(sp.config).name : "");
  }
  auto chain = [&](bool early) {
    return time_us([&](int i) {
      MOESERVE_CUDA_CHECK(cuda::moe_route(static_cast<float*>(logits[size_t(i) % kRoutings].data()), T, E, K, 0,
                                          static_cast<float*>(bias.data()), nullptr, ids.data(), true, 1.5f,
                                          chosen.data(), static_cast<float*>(wts.data()), st));
      MOESERVE_CUDA_CHECK(cuda::moe_route_gather_quant_f32(chosen.data(), T, K, E, static_cast<float*>(x.data()), D,
                                                           counts.data(), ros.data(), sor.data(), af, saf, sa_ld, st));
      cuda::MoeW4A8Chain c13, c2;
      c13.item_counter = c2.item_counter = counter.data();
      c13.prefetch_next = &w2;
      c13.prefix_bytes = cuda::moe_w4a8_prefetch_prefix(w2.N, w2.K, TK, size_t(16) << 20);
      c13.settled_ids = chosen.data();
      c2.counts_settled = true;
      MOESERVE_CUDA_CHECK(cuda::moe_grouped_gemm_w4a8_contiguous(w13, {af, saf, TK, sa_ld}, counts.data(), h13.data(),
                                                                 cuda::MoeOutType::F32, TK, -1, st, c13));
      MOESERVE_CUDA_CHECK(cuda::moe_swiglu_quant_f32(static_cast<float*>(h13.data()), I, sor.data(), TK,
                                                     static_cast<float*>(wts.data()), 10.0f, af, saf, sa_ld, st, early));
      MOESERVE_CUDA_CHECK(cuda::moe_grouped_gemm_w4a8_contiguous(w2, {af, saf, TK, sa_ld}, counts.data(), y.data(),
                                                                 cuda::MoeOutType::F32, TK, -1, st, c2));
      MOESERVE_CUDA_CHECK(cuda::moe_combine(static_cast<float*>(y.data()), D, ros.data(), T, K,
                                            static_cast<float*>(out.data()), st));
    }, 10);
  };
  // The first passes over freshly allocated experts run up to 15 % slower (H100, sixty-fifth session): two untimed
  // rounds, then three interleaved ones, each variant's median reported.
  for (int r = 0; r < 2; ++r)
    for (bool early : {true, false}) chain(early);
  std::vector<double> us[2];
  for (int r = 0; r < 3; ++r)
    for (int v = 0; v < 2; ++v) us[v].push_back(chain(v == 0));
  for (int v = 0; v < 2; ++v) {
    std::sort(us[v].begin(), us[v].end());
    report(v == 0 ? "MoE routed mxfp4 (W4A8 chain)" : "MoE routed mxfp4 (W4A8 chain, W2 after SwiGLU)", shape, us[v][1],
           bytes, 2.0 * TK * 3 * I * D, roof_fp8, false);
  }
}

// ---------------------------------------------------------------------------------- per-layer decode step
// Weights and KV a decode step touches per layer. FP8 weights: 1 byte each plus an fp32 scale per 128 x 128 block;
// routed experts FP8 or MXFP4 (1/2 + 1/32: e2m1 plus one E8M0 per 32); BF16 the router, compressors and indexer
// weights; fp32 the two mHC sites' mixing weights (fn [24, 4D]: 3.1 MB a layer for V4-Flash, counted since the
// twenty-ninth session). Norm weights, sinks and biases (a few KB) are left out, as are activations.
double layer_roofline_bytes(const io::ModelConfig& c, int B, int ctx, bool c4, bool mxfp4, double* kv_bytes) {
  const double D = double(c.hidden_size), H = double(c.num_heads), hd = double(c.head_dim), ql = double(c.q_lora_rank);
  const double G = double(c.o_groups), ol = double(c.o_lora_rank), E = double(c.n_routed_experts), I = double(c.moe_intermediate_size);
  const double fp8 = 1.0 + 4.0 / (128 * 128);                // a byte per weight and its block's scale
  double w8 = ql * D + H * hd * ql + hd * D + G * ol * D;    // wq_a, wq_b, wkv, wo_b
  w8 += G * ol * (H * hd / G);                               // wo_a (as quantized checkpoints store it)
  w8 += 3 * I * D;                                           // shared expert
  double w = w8 * fp8;
  w += E * D * 2;                                            // router bf16
  w += 2 * double(c.hc_mix()) * double(c.hc_mult) * D * 4;   // the two mHC sites' fn, fp32
  const double active = E * (1.0 - std::pow(1.0 - 6.0 / E, B));
  w += active * 3 * I * D * (mxfp4 ? 0.53125 : fp8);         // routed experts
  double kv = B * 128 * hd * 4;                              // window (fp32 pool)
  if (c4) {
    w += 2 * (2 * hd) * D * 2 + 2 * (2 * 128) * D * 2;       // compressor + indexer compressor (bf16)
    w += double(c.index_n_heads) * 128 * ql * fp8 + double(c.index_n_heads) * D * 2;
    kv += B * (double(c.index_topk) * hd * 4 + ctx / 4.0 * 128 * 4);
  } else {
    w += 2 * hd * D * 2;
    kv += B * (ctx / 128.0) * hd * 4;
  }
  *kv_bytes = kv;
  return w + kv;
}

// A dummy V4-Flash model of a few layers with its KV cache and one step's requests (the layer benchmarks).
struct LayerStack {
  std::unique_ptr<model::GpuModel> m;
  std::unique_ptr<model::GpuKvCache> cache;
  std::vector<cache::SequenceKv> seqs;
  std::vector<int32_t> toks;
  std::vector<model::ForwardRequest> reqs;
  std::vector<int64_t> first, count;
};

void bench_layer_decode(cuda::Blas& blas) {
  if (!want("layer")) return;
  io::ModelConfig c = io::load_model_config(std::string(MOESERVE_SOURCE_DIR) + "/presets/models/deepseek-v4-flash/config.json");
  // MOESERVE_LAYER_CTX: the tokens before the step (default 4096). At 4096 the step's token completes no
  // compressor block; at 4095 it completes one of every compressor (C4, C128 and the indexer's), the steps whose
  // entries the compressors emit (one in 4 on C4 layers, one in 128 on C128 layers).
  const char* ctx_env = std::getenv("MOESERVE_LAYER_CTX");
  const int ctx = ctx_env ? std::max(128, std::atoi(ctx_env)) : 4096;
  std::vector<std::pair<std::string, double>> results;
  // Routed experts FP8 (skinny GEMM) or MXFP4 (the W4A8 grouped GEMM), at batch 1, 8, 32.
  // MOESERVE_LAYER_EXPERTS=mxfp4 (or fp8) runs only that expert format.
  // MOESERVE_LAYER_BATCHES (a comma list of 1, 8, 32) runs only those batch sizes (quicker A/B runs).
  const char* only = std::getenv("MOESERVE_LAYER_EXPERTS");
  const char* batches = std::getenv("MOESERVE_LAYER_BATCHES");
  for (int run = 0; run < 6; ++run) {
    const cuda::WeightType et = run < 3 ? cuda::WeightType::FP8 : cuda::WeightType::MXFP4;
    if (only && std::string(only) != (run < 3 ? "fp8" : "mxfp4")) continue;
    const int B = std::array<int, 3>{1, 8, 32}[size_t(run % 3)];
    if (batches && ("," + std::string(batches) + ",").find("," + std::to_string(B) + ",") == std::string::npos) continue;
    const bool mxfp4 = et == cuda::WeightType::MXFP4;
    // The 2-layer and the 4-layer model (layers 2 (C4) and 3 (C128) are the difference), both built and captured
    // first, then timed in alternating rounds so that both see the same GPU state: timed one after the other, the
    // 2-layer graph read 500 or 545 us depending on what ran before it (SM clock at 1980 MHz in both cases; cause
    // not found), while the 4-layer one held at ~780.
    std::array<LayerStack, 2> stacks;
    for (int li = 0; li < 2; ++li) {
      LayerStack& k = stacks[size_t(li)];
      // The checkpoint numerics, as a server of these weights runs them (FP8 activations, FP8 kv, FP4 indexer).
      k.m = model::GpuModel::dummy(c, li == 0 ? 2 : 4, cuda::WeightType::FP8, et, 3, {false, model::Numerics::checkpoint()});
      k.cache = std::make_unique<model::GpuKvCache>(k.m->kv_layout(), B, int64_t(B) * (ctx / 256 + 2));
      k.seqs.resize(size_t(B));
      // Distinct tokens: identical ones give identical hidden states, so every sequence routes to the same 6
      // experts and a batch touches 6 experts' weights, not the ~E (1 - (1 - 6/E)^B) the roofline counts.
      for (int q = 0; q < B; ++q) k.toks.push_back(int32_t(5 + (q * 7919) % int(c.vocab_size - 5)));
      for (auto& sq : k.seqs) {
        sq = k.cache->host().open_sequence();
        k.cache->host().reserve(sq, ctx + 64);
        sq.length = ctx;  // the pools' content does not change the work of a step
      }
      for (int q = 0; q < B; ++q)
        k.reqs.push_back({&k.seqs[size_t(q)], std::span<const int32_t>(&k.toks[size_t(q)], 1), false, false});
      for (int i = 0; i < 3; ++i) k.m->forward_async(*k.cache, k.reqs, &k.first, &k.count, true, ctx + 64);  // eager, capture, replay
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(k.m->stream()));
    }
    const int reps = 10;
    // MOESERVE_PROFILE_LAYER_B=1: a profiler range (nsys --capture-range=cudaProfilerApi) around one round of
    // timed replays of the 4-layer model at that batch, for a per-kernel breakdown: MXFP4 experts, or FP8 ones
    // under MOESERVE_LAYER_EXPERTS=fp8.
    const char* prof_b = std::getenv("MOESERVE_PROFILE_LAYER_B");
    const bool profile = prof_b && std::atoi(prof_b) == B && (mxfp4 || only);
    // The best of 4 alternating rounds of `reps` replays each (clocks are not fixed; single rounds varied by 20 %).
    double step[2] = {1e30, 1e30};
    for (int round = 0; round < (profile ? 1 : 4); ++round)
      for (int li = 0; li < 2; ++li) {
        LayerStack& k = stacks[size_t(li)];
        const bool prof = profile && li == 1;
        if (prof) cudaProfilerStart();
        const float ms = bench::elapsed_ms(k.m->stream(), [&] {
          for (int i = 0; i < reps; ++i) k.m->forward_async(*k.cache, k.reqs, &k.first, &k.count, true, ctx + 64);
        });
        if (prof) cudaProfilerStop();
        step[li] = std::min(step[li], double(ms) * 1000.0 / reps);
      }
    const double per_layer = (step[1] - step[0]) / 2.0;
    double kv4, kv128;
    const double bytes = (layer_roofline_bytes(c, B, ctx, true, mxfp4, &kv4) + layer_roofline_bytes(c, B, ctx, false, mxfp4, &kv128)) / 2.0;
    report(std::string("V4-Flash decode step / layer, ") + (mxfp4 ? "mxfp4 (W4A8)" : "fp8") + " experts",
           "B=" + std::to_string(B) + " ctx " + std::to_string(ctx) + " (C4+C128 avg)", per_layer,
           bytes, 0, roof_fp8, false);
    std::printf("|   (graph replay: 2 layers + embed/head %.1f us, 4 layers %.1f us; KV bytes/layer %.2f MB) |\n", step[0],
                step[1], (kv4 + kv128) / 2e6);
    results.push_back({(mxfp4 ? "mxfp4 b" : "fp8 b") + std::to_string(B), 100.0 * (bytes / roof_bw * 1e6) / per_layer});
  }
  layer_summary = "V4-Flash layer decode vs memory roofline:";
  for (auto& [b, p] : results) layer_summary += " " + b + " " + std::to_string(int(p + 0.5)) + "%";
  std::printf("%s\n", layer_summary.c_str());
}

// V4-Flash prefill per layer: S sequences' prompts of P tokens each (positions 0 .. P - 1, one chunk each, one
// forward: a server's prefill step) through the 2- and the 4-layer dummy models (layers 2 (C4) and 3 (C128) are
// the difference), MXFP4 experts, the checkpoint numerics as a server of these weights runs them. Best of 3
// alternating rounds; the difference halved. MOESERVE_PROFILE_PREFILL=S+D: a profiler range (nsys
// --capture-range=cudaProfilerApi) around one forward of the 4-layer model at that shape.
void bench_layer_prefill() {
  if (!want("prefill")) return;
  io::ModelConfig c = io::load_model_config(std::string(MOESERVE_SOURCE_DIR) + "/presets/models/deepseek-v4-flash/config.json");
  const char* prof = std::getenv("MOESERVE_PROFILE_PREFILL");
  // D: sequences that decode one token after P tokens, in the same forward as the S prompts (a server's mixed step).
  struct Shape { int S, P, D; };
  for (Shape sh : {Shape{1, 4096, 0}, Shape{1, 256, 0}, Shape{3, 256, 0}, Shape{3, 256, 1}, Shape{0, 256, 1},
                   Shape{8, 256, 0}, Shape{16, 256, 0}}) {
    const int S = sh.S, P = sh.P, D = sh.D;
    std::array<LayerStack, 2> stacks;
    for (int li = 0; li < 2; ++li) {
      LayerStack& k = stacks[size_t(li)];
      k.m = model::GpuModel::dummy(c, li == 0 ? 2 : 4, cuda::WeightType::FP8, cuda::WeightType::MXFP4, 3,
                                   {false, model::Numerics::checkpoint()});
      k.cache = std::make_unique<model::GpuKvCache>(k.m->kv_layout(), S + D, int64_t(S + D) * (P / 256 + 2));
      for (int i = 0; i < P; ++i) k.toks.push_back(int32_t(5 + (i * 7919) % int(c.vocab_size - 5)));
      k.seqs.reserve(size_t(S + D));
      for (int q = 0; q < S + D; ++q) {
        k.seqs.push_back(k.cache->host().open_sequence());
        k.cache->host().reserve(k.seqs.back(), q < D ? P + 1 : P);
        if (q < D) k.seqs.back().length = P;  // its KV is the pools' zeros: the timing does not read values
        k.reqs.push_back({&k.seqs.back(), std::span<const int32_t>(k.toks).first(q < D ? 1 : size_t(P)), false, false});
      }
      k.m->forward_async(*k.cache, k.reqs, &k.first, &k.count);  // warm-up (workspaces, cuBLASLt plans)
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(k.m->stream()));
    }
    double t[2] = {1e30, 1e30};
    for (int round = 0; round < 3; ++round)
      for (int li = 0; li < 2; ++li) {
        LayerStack& k = stacks[size_t(li)];
        t[li] = std::min(t[li], double(bench::elapsed_ms(k.m->stream(), [&] {
                                  k.m->forward_async(*k.cache, k.reqs, &k.first, &k.count);
                                })));
      }
    if (prof && std::string(prof) == std::to_string(S) + "+" + std::to_string(D)) {
      LayerStack& k = stacks[1];
      cudaProfilerStart();
      k.m->forward_async(*k.cache, k.reqs, &k.first, &k.count);
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(k.m->stream()));
      cudaProfilerStop();
    }
    const double per_layer = (t[1] - t[0]) / 2.0;
    std::printf("| V4-Flash prefill / layer, mxfp4 experts | S=%d x P=%d + %d decoding (C4+C128 avg) | %9.3f ms | %.0f "
                "tokens/s per layer | (2 layers + embed/head %.2f ms, 4 layers %.2f ms) |\n",
                S, P, D, per_layer, 1000.0 * (S * P + D) / per_layer, t[0], t[1]);
  }
}

// End to end on a committed fixture (the peer: HF transformers' eager forward, tools/torch_peers.py): prefill
// a 16-token prompt, then 64 greedy tokens one at a time, graphs on.
void bench_fixture() {
  if (!want("fixture")) return;
  for (const char* name : {"tiny_hf", "demo"}) {
    const std::string dir = std::string(MOESERVE_SOURCE_DIR) + (std::string(name) == "demo" ? "/models/demo" : "/tests/fixtures/models/tiny_hf");
    auto model = model::Model::load(dir);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 16; ++i) prompt.push_back(int32_t(2 + (i * 37) % int(model->config().vocab_size - 2)));
    engine::GenerateOptions o;
    o.max_new_tokens = 64;
    for (int graphs = 0; graphs < 2; ++graphs) {
      engine::generate_cuda(*model, prompt, o, {true, graphs == 1});  // warm-up (upload, capture)
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      cudaEventRecord(a);
      auto r = engine::generate_cuda(*model, prompt, o, {true, graphs == 1});
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      std::printf("| fixture %-20s | prefill 16 + %zu greedy tokens%s | %9.1f ms (incl. upload) | %.0f tokens/s |\n", name,
                  r.output_ids.size(), graphs ? ", CUDA graphs" : "", ms, 1000.0 * double(r.output_ids.size()) / ms);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) filter = argv[1];
  if (const char* s = std::getenv("MOESERVE_BENCH_SHAPE")) shape_filter = s;
  const auto* dev_info = moeserve::bench::device_or_skip();
  if (!dev_info) return 0;
  const auto& info = *dev_info;
  const auto& roofs = moeserve::bench::gpu_ceilings(info.name);
  roof_bw = roofs.copy_bytes_per_s, roof_bf16 = roofs.bf16_flops_per_s, roof_fp8 = roofs.fp8_flops_per_s;
  roof_fp32 = roofs.fp32_flops_per_s;
  std::printf("# bench_gpu_ops on %s (%d SMs); ceilings: %.2f TB/s, bf16 %.0f, fp8 %.0f, fp32 SIMT %.0f TFLOP/s\n",
              info.name.c_str(), info.multiprocessors, roof_bw / 1e12, roof_bf16 / 1e12, roof_fp8 / 1e12, roof_fp32 / 1e12);
  std::printf("| %-28s | %-34s | %9s | %9s | %9s | %8s | %7s | %8s | %6s |\n", "op", "shape", "us", "MB", "GFLOP", "GB/s",
              "TFLOP/s", "roof us", "roof%");
  MOESERVE_CUDA_CHECK(cudaStreamCreate(&st));
  cuda::Blas blas;
  // V4-Flash (D 4096, H 64, q_lora 1024, o 8x1024, I 2048) and V4-Pro (D 7168, H 128, q_lora 1536, o 16x1024, I 3072).
  struct Lin { const char* model; const char* name; int N, K; };
  for (Lin l : {Lin{"flash", "wq_a", 1024, 4096}, Lin{"flash", "wq_b", 32768, 1024}, Lin{"flash", "wkv", 512, 4096},
                Lin{"flash", "wo_b", 4096, 8192}, Lin{"flash", "shared w13", 4096, 4096}, Lin{"flash", "shared w2", 4096, 2048},
                Lin{"flash", "indexer wq_b", 8192, 1024}, Lin{"pro", "wq_b", 65536, 1536}, Lin{"pro", "wo_b", 7168, 16384}}) {
    bench_linear(l.model, l.name, l.N, l.K, true, blas, {1, 2, 4, 8, 16, 32, 64});
  }
  bench_linear("flash", "wo_a group (bf16)", 1024, 4096, false, blas, {1, 2, 4, 8, 32, 64});
  bench_grouped_linear("flash", "wo_a (fp8, 8 groups)", 8, 1024, 4096, {1, 2, 4, 8, 16, 32, 64});
  bench_grouped_linear("pro", "wo_a (fp8, 16 groups)", 16, 1024, 4096, {1, 8, 32});
  bench_linear("flash", "compressor C4 (bf16)", 2048, 4096, false, blas, {1, 2, 4, 8, 32});
  bench_linear("flash", "gate (bf16)", 256, 4096, false, blas, {1, 2, 4, 8});
  bench_linear("flash", "indexer weights (bf16)", 64, 4096, false, blas, {1, 2, 8});
  bench_linear("flash", "head (bf16)", 129280, 4096, false, blas, {1, 2, 4, 8});
  for (int M : {4096, 16384, 32768}) {  // prefill GEMMs through cuBLASLt
    bench_linear("flash", "wq_b", 32768, 1024, true, blas, {M});
    bench_linear("flash", "shared w13", 4096, 4096, true, blas, {M});
    bench_linear("flash", "wo_a group (bf16)", 1024, 4096, false, blas, {M});
  }
  bench_linear("pro", "wo_b", 7168, 16384, true, blas, {4096});
  bench_gemv_chain("flash wo_a (8 groups) -> wo_b", {8, 1024, 4096}, {1, 4096, 8192});
  bench_gemv_chain("flash wq_a -> wq_b", {1, 1024, 4096}, {1, 32768, 1024});
  bench_gemv_chain("flash shared w13 -> w2", {1, 4096, 4096}, {1, 4096, 2048});
  bench_gemv_chain("flash wo_b -> wo_b", {1, 4096, 8192}, {1, 4096, 8192});
  for (int B : {1, 8, 32, 64}) {
    bench_attention("flash", 64, B, 1, 8192, 4, true, 512);
    bench_attention("flash", 64, B, 1, 8192, 128, false, 0);
  }
  bench_attention("pro", 128, 1, 1, 8192, 4, true, 1024);
  bench_attention("flash", 64, 1, 4096, 4096, 4, true, 512);
  bench_attention("flash", 64, 1, 4096, 4096, 128, false, 0);
  for (int B : {1, 8, 32, 64}) bench_indexer("flash", B, 1, 32768, 512);
  bench_indexer("flash", 1, 4096, 4096, 512);
  for (int T : {1, 8, 32, 64, 4096}) {
    bench_small_ops("flash", 4096, T);
    bench_small_ops("pro", 7168, T == 4096 ? 1 : T);
  }
  bench_sampling();
  for (int T : {1, 8, 32, 64}) bench_moe("flash", 256, 4096, 2048, T, true);
  bench_moe("pro", 384, 7168, 3072, 1, true);
  for (int T : {1, 4, 8, 32}) bench_moe_mxfp4("flash", 256, 4096, 2048, T);
  for (int T : {1, 4, 8}) bench_moe_mxfp4("pro", 384, 7168, 3072, T);
  bench_layer_decode(blas);
  bench_layer_prefill();
  bench_fixture();
  std::printf("decode ops >= 8 MB at M=1 reaching >= 60%% of roofline: %d of %d; %s\n", rows_ge8mb_ok, rows_ge8mb,
              layer_summary.c_str());
  return 0;
}
