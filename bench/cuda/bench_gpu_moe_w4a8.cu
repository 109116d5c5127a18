// Benchmark and tuner of the W4A8 MoE grouped GEMM (kernels/cuda/moe_w4a8.h) on DeepSeek-V4 Pro and Flash
// expert shapes with top-6 routing, side by side with the same expert GEMMs through cuBLASLt's Hopper
// block-scaled FP8 GEMM (weights as FP8 with 128x128 block scales, activations with 1x128 scales: what a
// dequantized copy of the experts would run), one cuBLASLt call per expert captured in a CUDA graph (cuBLASLt
// 13.1 has no grouped block-scaled FP8 GEMM).
//
//   bench_gpu_moe_w4a8 [--quick] [--tune FILE] [--out DIR] [--profile]
//     --tune FILE  sweep every tile config for every shape / token count / routing and write the dispatch table
//                  (src/kernels/cuda/moe_w4a8_dispatch_table.inc format) to FILE
//     --profile    one decode and one prefill launch of each kernel only (for ncu)
//
// Decode (1..256 tokens, masked layout, cap = tokens): achieved weight-read bandwidth = bytes of the touched
// experts' FP4 weights and E8M0 scales / time, against 4.28 TB/s. Prefill (4K..32K tokens, contiguous layout):
// FP8 TFLOP/s = 2 * tokens * 6 * N * K / time, against 1418. Timing: CUDA events around graph replays, warm-up,
// median of repeats; decode rotates 8 routings so the touched experts change between launches (the weights of
// the rotated sets exceed the 60 MB L2), prefill inputs exceed L2 by themselves.
// Row-count buckets for the tuner come from top-6 routing of uniform and Zipf(1.1) token->expert
// distributions (no routing histograms of real runs are available here).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_w4a8.h"

namespace {

using namespace moeserve;
namespace pack = moeserve::kernels::cpu;

constexpr double kCopyTBs = 4.28, kFp8Tflops = 1418.0;
constexpr int kTopk = 6;

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__global__ void fill_bytes_kernel(uint8_t* p, size_t n, uint64_t seed, uint8_t and_mask) {
  for (size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * 8; i < n; i += size_t(gridDim.x) * blockDim.x * 8) {
    uint64_t v = mix(seed ^ i);
    for (int b = 0; b < 8 && i + b < n; ++b) p[i + b] = uint8_t(v >> (8 * b)) & and_mask;
  }
}
__global__ void fill_scales_kernel(uint8_t* packed, size_t chunks, uint64_t seed) {
  for (size_t c = blockIdx.x * size_t(blockDim.x) + threadIdx.x; c < chunks; c += size_t(gridDim.x) * blockDim.x) {
    uint8_t* s = packed + c * pack::kChunkBytes + pack::kChunkWeightBytes;
    uint64_t v = mix(seed ^ c);
    const uint8_t base = uint8_t(118 + v % 5);
    for (int i = 0; i < pack::kChunkScaleBytes; ++i) s[i] = uint8_t(base + ((v >> (i % 60)) & 3));
  }
}
__global__ void fill_float_kernel(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}
void fill_bytes(void* p, size_t n, uint64_t seed, uint8_t mask = 0xff) {
  fill_bytes_kernel<<<2048, 256>>>(static_cast<uint8_t*>(p), n, seed, mask);
  CK(cudaGetLastError());
}
void fill_float(float* p, size_t n, float v) {
  fill_float_kernel<<<2048, 256>>>(p, n, v);
  CK(cudaGetLastError());
}

template <class T>
T* dalloc(size_t n) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

struct Shape {
  const char* name;
  int E, N, K;
};
const Shape kShapes[] = {
    {"pro_w13", 384, 6144, 7168},
    {"pro_w2", 384, 7168, 3072},
    {"flash_w13", 256, 4096, 4096},
    {"flash_w2", 256, 4096, 2048},
};

// Top-6 distinct experts per token, uniform or Zipf(1.1) over a random permutation of the experts.
std::vector<int> route_counts(std::mt19937& rng, int T, int E, bool zipf) {
  std::vector<double> w(E);
  for (int e = 0; e < E; ++e) w[e] = zipf ? 1.0 / std::pow(double(e + 1), 1.1) : 1.0;
  std::shuffle(w.begin(), w.end(), rng);
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<int> counts(E, 0);
  for (int t = 0; t < T; ++t) {
    int chosen[kTopk];
    for (int j = 0; j < kTopk; ++j) {
      int e;
      bool dup;
      do {
        e = pick(rng);
        dup = false;
        for (int i = 0; i < j; ++i) dup |= chosen[i] == e;
      } while (dup);
      chosen[j] = e;
      counts[e]++;
    }
  }
  return counts;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time (ms) of one call, from `batch` calls (call(i) for i = 0..batch-1) captured in a graph.
float time_calls(const std::function<void(int, cudaStream_t)>& call, int batch, int reps, cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < batch; ++i) call(i, stream);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int w = 0; w < 2; ++w) CK(cudaGraphLaunch(exec, stream));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, stream));
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / batch);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(t);
}

// ---------------------------------------------------------------------------------------------------------
// cuBLASLt peer: per-expert block-scaled FP8 GEMMs
// ---------------------------------------------------------------------------------------------------------
struct LtPeer {
  cublasLtHandle_t h = nullptr;
  void* workspace = nullptr;
  size_t ws_bytes = 64 << 20;
  std::string note;

  LtPeer() {
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) h = nullptr;
    workspace = dalloc<uint8_t>(ws_bytes);
  }

  // D[N x n] = W[N x K] . X[n x K]^T (mode 0) or D[n x N] = X . W^T (mode 1).
  bool setup(int N, int n, int K, int try_mode, cublasLtMatmulDesc_t* op, cublasLtMatrixLayout_t* la,
             cublasLtMatrixLayout_t* lb, cublasLtMatrixLayout_t* ld, cublasLtMatmulAlgo_t* algo) {
    cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatmulMatrixScale_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int m_rows = try_mode == 0 ? N : n, n_cols = try_mode == 0 ? n : N;
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, try_mode == 0 ? &blk : &vec, sizeof(blk));
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, try_mode == 0 ? &vec : &blk, sizeof(blk));
    cublasLtMatrixLayoutCreate(la, CUDA_R_8F_E4M3, K, m_rows, K);
    cublasLtMatrixLayoutCreate(lb, CUDA_R_8F_E4M3, K, n_cols, K);
    cublasLtMatrixLayoutCreate(ld, CUDA_R_16BF, m_rows, n_cols, m_rows);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, *op, *la, *lb, *ld, *ld, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    *algo = res.algo;
    return true;
  }

  // Plan for one expert GEMM of n token rows: the operand order that has an algorithm, padding n up to 16
  // then 128 rows if the library has none for n itself (decode peers then compute a few extra columns, with the
  // same weight bytes). Cached per (n, N, K). The first run on the H200 found no algorithm for n = 1 in either
  // order; this per-shape retry has not run on the GPU yet.
  struct Plan {
    int mode = -1, n_eff = 0;
    cublasLtMatmulAlgo_t algo{};
  };
  std::map<std::tuple<int, int, int>, Plan> plans;
  Plan plan_for(int N, int n, int K) {
    auto key = std::make_tuple(n, N, K);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan pl;
    for (int n_eff : {n, (n + 15) / 16 * 16, (n + 127) / 128 * 128}) {
      for (int m : {0, 1}) {
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulAlgo_t algo;
        const bool ok = setup(N, n_eff, K, m, &op, &la, &lb, &ld, &algo);
        cublasLtMatmulDescDestroy(op);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld);
        if (ok) {
          pl.mode = m;
          pl.n_eff = n_eff;
          pl.algo = algo;
          break;
        }
      }
      if (pl.mode >= 0) break;
    }
    if (pl.mode < 0) note = "cuBLASLt: no block-scaled FP8 algorithm (BLK128x128 x VEC128) for some expert shapes";
    else if (pl.n_eff != n) note = "cuBLASLt: some expert GEMMs padded to " + std::to_string(pl.n_eff) + " rows";
    plans[key] = pl;
    return pl;
  }

  // Enqueue the per-expert GEMMs for `counts` (rows grouped contiguously in x; x, xscale and y must hold
  // 128 rows of slack past the last expert for padded plans). False when some expert had no algorithm.
  bool enqueue(const std::vector<int>& counts, int N, int K, const uint8_t* w8, const float* wscale, const uint8_t* x,
               const float* xscale, void* y, cudaStream_t stream) {
    if (!h) return false;
    size_t row = 0;
    bool all = true;
    for (size_t e = 0; e < counts.size(); ++e) {
      const int n = counts[e];
      if (n == 0) continue;
      const Plan pl = plan_for(N, n, K);
      if (pl.mode < 0) {
        all = false;
        row += n;
        continue;
      }
      cublasLtMatmulDesc_t op;
      cublasLtMatrixLayout_t la, lb, ld;
      cublasLtMatmulAlgo_t algo;
      setup(N, pl.n_eff, K, pl.mode, &op, &la, &lb, &ld, &algo);
      const uint8_t* we = w8 + e * size_t(N) * K;
      const float* wse = wscale + e * size_t((N + 127) / 128) * ((K + 127) / 128);
      const uint8_t* xe = x + row * K;
      const float* xse = xscale + row * size_t(K / 128);
      void* ye = static_cast<uint16_t*>(y) + row * size_t(N);
      const void* A = pl.mode == 0 ? static_cast<const void*>(we) : xe;
      const void* B = pl.mode == 0 ? static_cast<const void*>(xe) : we;
      const float* As = pl.mode == 0 ? wse : xse;
      const float* Bs = pl.mode == 0 ? xse : wse;
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &As, sizeof(As));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &Bs, sizeof(Bs));
      const float alpha = 1.0f, beta = 0.0f;
      cublasStatus_t st = cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, ye, ld, ye, ld, &pl.algo, workspace,
                                         ws_bytes, stream);
      cublasLtMatmulDescDestroy(op);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(ld);
      if (st != CUBLAS_STATUS_SUCCESS) {
        note = "cuBLASLt matmul failed: status " + std::to_string(int(st));
        return false;
      }
      row += n;
    }
    return all;
  }
};

// ---------------------------------------------------------------------------------------------------------
struct Result {
  std::string shape, phase, dist;
  int T;
  double best_ms, pick_ms, peer_ms;
  std::string best_cfg, pick_cfg;
  double metric_best, metric_pick, frac_pick, peer_ratio;  // TB/s or TFLOP/s; pick / ceiling; peer_ms / pick_ms
};

int bucket_of(int expected) {
  static const int b[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  for (int x : b)
    if (expected <= x) return x;
  return INT_MAX;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, profile = false;
  std::string tune_file, out_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--profile") profile = true;
    else if (a == "--tune" && i + 1 < argc) tune_file = argv[++i];
    else if (a == "--out" && i + 1 < argc) out_dir = argv[++i];
  }
  if (!cuda::available()) {
    std::printf("bench_gpu_moe_w4a8: skipped (%s)\n", cuda::device_info().reason.c_str());
    return 0;
  }
  const std::string gpu = cuda::device_info().name;
  std::printf("GPU: %s, %d SMs, L2 %zu MB\n", gpu.c_str(), cuda::device_info().multiprocessors,
              cuda::device_info().l2_bytes >> 20);
  const bool sweep = !tune_file.empty();
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  LtPeer lt;
  std::mt19937 rng(12345);

  std::vector<int> decode_T = {1, 4, 16, 64, 128, 256};
  std::vector<int> prefill_T = {4096, 16384, 32768};
  if (quick) {
    decode_T = {1, 16, 256};
    prefill_T = {8192};
  }
  if (profile) {
    decode_T = {64};
    prefill_T = {16384};
  }
  const int R = 8;  // decode routings rotated per timing batch
  std::vector<Result> results;
  // tuning: per (shape, bucket, config) summed relative time
  std::map<std::pair<std::string, int>, std::vector<double>> tune_acc;

  for (const Shape& sh : kShapes) {
    if (profile && std::strcmp(sh.name, "pro_w13") != 0) continue;
    const int E = sh.E, N = sh.N, K = sh.K;
    const size_t wbytes = pack::moe_w4a8_packed_expert_bytes(N, K) * E;
    uint8_t* w = dalloc<uint8_t>(wbytes);
    uint64_t* flags = dalloc<uint64_t>(pack::moe_w4a8_flag_expert_words(N, K) * E);
    fill_bytes(w, wbytes, 1);
    fill_scales_kernel<<<1024, 256>>>(w, wbytes / pack::kChunkBytes, 2);
    CK(cudaMemset(flags, 0, pack::moe_w4a8_flag_expert_words(N, K) * E * 8));
    // Peer weights: FP8 [E][N][K] (|v| < 2, no NaN) with 128x128 block scales.
    const size_t w8bytes = size_t(E) * N * K;
    uint8_t* w8 = dalloc<uint8_t>(w8bytes);
    fill_bytes(w8, w8bytes, 3, 0xbf);
    const size_t wsn = size_t(E) * ((N + 127) / 128) * ((K + 127) / 128);
    float* wscale = dalloc<float>(wsn);
    fill_float(wscale, wsn, 1.0f / 64);
    cuda::MoeW4A8Weights W{w, flags, E, N, K};
    const double expert_bytes = double(N) * K * (0.5 + 1.0 / 32);

    for (int phase = 0; phase < 2; ++phase) {
      const bool decode = phase == 0;
      for (int T : decode ? decode_T : prefill_T) {
        const int cap = T;
        const int rows = decode ? E * cap : T * kTopk;
        const int sa_ld = (rows + 3) / 4 * 4;
        uint8_t* a = dalloc<uint8_t>(size_t(rows + 128) * K);  // +128 rows: slack for padded peer GEMMs
        float* sa = dalloc<float>(size_t(K / 128) * sa_ld);
        uint16_t* y = dalloc<uint16_t>(size_t(rows + 128) * N);
        fill_bytes(a, size_t(rows + 128) * K, 5 + T, 0xbf);
        fill_float(sa, size_t(K / 128) * sa_ld, 0.125f);
        // peer activation scales [rows][K/128] (VEC128) for the grouped rows
        const size_t xscale_n = (size_t(T) * kTopk + 128) * (K / 128);
        float* xscale = dalloc<float>(xscale_n);
        fill_float(xscale, xscale_n, 0.125f);
        cuda::MoeW4A8Input in{a, sa, rows, sa_ld};
        const int expected = std::max(1, (T * kTopk + E - 1) / E);
        for (int zipf = 0; zipf < 2; ++zipf) {
          const int nsets = decode ? R : 1;
          std::vector<std::vector<int>> sets;
          std::vector<int*> dcounts;
          double touched = 0;
          for (int s = 0; s < nsets; ++s) {
            sets.push_back(route_counts(rng, T, E, zipf));
            int* dc = dalloc<int>(E);
            CK(cudaMemcpy(dc, sets.back().data(), E * sizeof(int), cudaMemcpyHostToDevice));
            dcounts.push_back(dc);
            for (int c : sets.back()) touched += c > 0 ? 1 : 0;
          }
          touched /= nsets;
          const int batch = decode ? R : 1;
          const int reps = quick || profile ? 3 : 5;
          auto run = [&](int cfg, int reps) {
            return time_calls(
                [&](int i, cudaStream_t st) {
                  cudaError_t err = decode ? cuda::moe_grouped_gemm_w4a8_masked(W, in, dcounts[i % nsets], cap, y,
                                                                               cuda::MoeOutType::BF16, expected, cfg, st)
                                           : cuda::moe_grouped_gemm_w4a8_contiguous(W, in, dcounts[i % nsets], y,
                                                                                   cuda::MoeOutType::BF16, expected, cfg, st);
                  CK(err);
                },
                batch, reps, stream);
          };
          const int pick = cuda::moe_w4a8_pick_config(E, N, K, expected);
          if (profile) {  // one plain launch of each kernel, for ncu
            if (zipf == 0) {
              CK(decode ? cuda::moe_grouped_gemm_w4a8_masked(W, in, dcounts[0], cap, y, cuda::MoeOutType::BF16,
                                                              expected, pick, stream)
                        : cuda::moe_grouped_gemm_w4a8_contiguous(W, in, dcounts[0], y, cuda::MoeOutType::BF16,
                                                                  expected, pick, stream));
              lt.enqueue(sets[0], N, K, w8, wscale, a, xscale, y, stream);
              CK(cudaStreamSynchronize(stream));
              std::printf("profile: %s %s T=%d config %s\n", sh.name, decode ? "decode" : "prefill", T,
                          cuda::moe_w4a8_config(pick).name);
            }
            for (int* p : dcounts) cudaFree(p);
            continue;
          }
          Result res{sh.name, decode ? "decode" : "prefill", zipf ? "zipf" : "uniform", T, 0, 0, 0, "", "", 0, 0, 0, 0};
          res.pick_ms = run(pick, reps);
          res.pick_cfg = cuda::moe_w4a8_config(pick).name;
          res.best_ms = res.pick_ms;
          res.best_cfg = res.pick_cfg;
          if (sweep) {
            std::vector<double> t(cuda::moe_w4a8_config_count());
            for (int c = 0; c < cuda::moe_w4a8_config_count(); ++c) {
              // Skip the hopeless corners to keep the sweep short: token tiles far smaller than the rows of an
              // expert (prefill) or far larger (small decode batches) are never the fastest.
              const int bt = cuda::moe_w4a8_config(c).block_tokens;
              if (c != pick && ((!decode && bt < 32) || (decode && T <= 64 && bt > 32))) {
                t[c] = 1e30;
                continue;
              }
              t[c] = c == pick ? res.pick_ms : run(c, 3);
              if (t[c] < res.best_ms) {
                res.best_ms = t[c];
                res.best_cfg = cuda::moe_w4a8_config(c).name;
              }
            }
            auto& acc = tune_acc[{sh.name, bucket_of(expected)}];
            acc.resize(t.size(), 0.0);
            const double best = *std::min_element(t.begin(), t.end());
            for (size_t c = 0; c < t.size(); ++c) acc[c] += std::min(t[c] / best, 100.0);
          }
          // Peer: grouped rows of the first routing set (decode: its active experts only).
          double peer = -1;
          {
            const std::vector<int>& c0 = sets[0];
            std::vector<int> c_all;
            int sets_ok = 1;
            peer = time_calls(
                [&](int i, cudaStream_t st) {
                  if (!lt.enqueue(sets[i % nsets], N, K, w8, wscale, a, xscale, y, st)) sets_ok = 0;
                },
                batch, reps, stream);
            if (!sets_ok) peer = -1;
            (void)c0;
          }
          res.peer_ms = peer;
          if (decode) {
            const double bytes = touched * expert_bytes;
            res.metric_best = bytes / (res.best_ms * 1e-3) / 1e12;
            res.metric_pick = bytes / (res.pick_ms * 1e-3) / 1e12;
            res.frac_pick = res.metric_pick / kCopyTBs;
          } else {
            const double flops = 2.0 * T * kTopk * double(N) * K;
            res.metric_best = flops / (res.best_ms * 1e-3) / 1e12;
            res.metric_pick = flops / (res.pick_ms * 1e-3) / 1e12;
            res.frac_pick = res.metric_pick / kFp8Tflops;
          }
          res.peer_ratio = peer > 0 ? peer / res.pick_ms : 0;
          std::printf("%-9s %-7s %-7s T=%-5d experts=%6.1f  w4a8 %9.1f us [%s] %7.3f %s (%4.1f%%)  best %9.1f us [%s]  "
                      "cublasLt-fp8 %9.1f us  peer/w4a8 %.2fx\n",
                      sh.name, res.phase.c_str(), res.dist.c_str(), T, touched, res.pick_ms * 1e3, res.pick_cfg.c_str(),
                      res.metric_pick, decode ? "TB/s" : "TFLOP/s", 100 * res.frac_pick, res.best_ms * 1e3,
                      res.best_cfg.c_str(), peer > 0 ? peer * 1e3 : 0.0, res.peer_ratio);
          std::fflush(stdout);
          results.push_back(res);
          for (int* p : dcounts) cudaFree(p);
        }
        cudaFree(a);
        cudaFree(sa);
        cudaFree(y);
        cudaFree(xscale);
      }
    }
    cudaFree(w);
    cudaFree(flags);
    cudaFree(w8);
    cudaFree(wscale);
  }
  if (!lt.note.empty()) std::printf("note: %s\n", lt.note.c_str());

  // Glue kernels at a decode and a prefill size (Pro dims).
  if (!profile) {
    for (int T : {64, 16384}) {
      const int E = 384, D = 7168, I = 3072;
      std::vector<int> ids(size_t(T) * kTopk);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < kTopk; ++j) ids[size_t(t) * kTopk + j] = (t * 37 + j * 61) % E;
      const int rows = T * kTopk;
      int *dids = dalloc<int>(ids.size()), *counts = dalloc<int>(E), *ros = dalloc<int>(rows), *sor = dalloc<int>(rows);
      CK(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
      size_t wsb = cuda::moe_route_rows_workspace(T, kTopk, E);
      void* ws = dalloc<uint8_t>(wsb);
      uint16_t* x = dalloc<uint16_t>(size_t(T) * D);
      uint16_t* h = dalloc<uint16_t>(size_t(rows) * 2 * I);
      uint16_t* y2 = dalloc<uint16_t>(size_t(rows) * D);
      uint8_t* a = dalloc<uint8_t>(size_t(rows) * D);
      float* sa = dalloc<float>(size_t(D / 128) * rows);
      float* rw = dalloc<float>(rows);
      float* out = dalloc<float>(size_t(T) * D);
      fill_bytes(x, size_t(T) * D * 2, 7, 0x3f);
      fill_bytes(h, size_t(rows) * 2 * I * 2, 8, 0x3f);
      fill_bytes(y2, size_t(rows) * D * 2, 9, 0x3f);
      fill_float(rw, rows, 0.5f);
      const int reps = 5;
      float t_route = time_calls([&](int, cudaStream_t st) { CK(cuda::moe_route_rows(dids, T, kTopk, E, 0, counts, ros, sor, ws, wsb, st)); }, 1, reps, stream);
      float t_gather = time_calls([&](int, cudaStream_t st) { CK(cuda::moe_gather_quant(x, D, sor, rows, kTopk, a, sa, rows, st)); }, 1, reps, stream);
      float t_swiglu = time_calls([&](int, cudaStream_t st) { CK(cuda::moe_swiglu_quant(h, I, sor, rows, rw, 10.0f, true, a, sa, rows, st)); }, 1, reps, stream);
      float t_combine = time_calls([&](int, cudaStream_t st) { CK(cuda::moe_combine(y2, D, ros, dids, T, kTopk, out, st)); }, 1, reps, stream);
      std::printf("glue pro T=%-5d route %.1f us, gather+quant %.1f us, swiglu+quant %.1f us, combine %.1f us\n", T,
                  t_route * 1e3, t_gather * 1e3, t_swiglu * 1e3, t_combine * 1e3);
      for (void* p : std::initializer_list<void*>{dids, counts, ros, sor, ws, x, h, y2, a, sa, rw, out}) cudaFree(p);
    }
  }

  if (sweep) {
    std::string table =
        "// Generated by `bench_gpu_moe_w4a8 --tune` (bench/cuda/bench_gpu_moe_w4a8.cu); do not edit by hand.\n"
        "// {gpu name, E, N, K, largest expected rows per active expert of the bucket, config name}; buckets from\n"
        "// top-6 routing of uniform and Zipf(1.1) token->expert distributions, expected rows = ceil(6T/E).\n";
    for (const Shape& sh : kShapes) {
      std::vector<std::pair<int, std::string>> rows;
      for (const auto& [key, acc] : tune_acc) {
        if (key.first != sh.name) continue;
        const int best = int(std::min_element(acc.begin(), acc.end()) - acc.begin());
        rows.push_back({key.second, cuda::moe_w4a8_config(best).name});
      }
      std::sort(rows.begin(), rows.end());
      for (size_t i = 0; i < rows.size(); ++i) {
        char line[256];
        const bool last = i + 1 == rows.size();
        std::snprintf(line, sizeof line, "{\"%s\", %d, %d, %d, %s, \"%s\"},\n", gpu.c_str(), sh.E, sh.N, sh.K,
                      last ? "INT_MAX" : std::to_string(rows[i].first).c_str(), rows[i].second.c_str());
        table += line;
      }
    }
    FILE* f = std::fopen(tune_file.c_str(), "w");
    if (f) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    }
    std::printf("dispatch table -> %s\n%s", tune_file.c_str(), table.c_str());
  }

  // Summary line: best decode bandwidth fraction and best prefill TFLOP fraction, with the peer ratios.
  double dec_best = 0, pre_best = 0, dec_ratio = 0, pre_ratio = 0;
  std::string dec_at, pre_at;
  for (const Result& r : results) {
    if (r.phase == "decode" && r.frac_pick > dec_best) {
      dec_best = r.frac_pick;
      dec_ratio = r.peer_ratio;
      dec_at = r.shape + " T=" + std::to_string(r.T);
    }
    if (r.phase == "prefill" && r.frac_pick > pre_best) {
      pre_best = r.frac_pick;
      pre_ratio = r.peer_ratio;
      pre_at = r.shape + " T=" + std::to_string(r.T);
    }
  }
  std::printf("moe_w4a8: decode best %.0f%% of 4.28TB/s (%s, %.2fx vs cublasLt-fp8), prefill best %.0f%% of 1418TF "
              "(%s, %.2fx vs cublasLt-fp8)\n",
              100 * dec_best, dec_at.c_str(), dec_ratio, 100 * pre_best, pre_at.c_str(), pre_ratio);
  return 0;
}
