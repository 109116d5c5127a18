// Benchmark and tuner of the W4A8 MoE grouped GEMM (kernels/cuda/moe_w4a8.h) on DeepSeek-V4 Pro and Flash
// expert shapes with top-6 routing, side by side with the same expert GEMMs through cuBLASLt's Hopper
// block-scaled FP8 GEMM (weights as FP8 e4m3 with 128x128 block scales, activations with 1x128 scales: what a
// copy of the experts dequantized from MXFP4 to FP8 would run; random FP8 weights of the same shapes here, only
// the time matters), one cuBLASLt call per active expert with that expert's row count, all captured in one CUDA
// graph (cuBLASLt 13.1 has no grouped block-scaled FP8 GEMM). The peer calls the CUDA backend's own wrapper,
// cuda::Blas::gemm_fp8_block (fp32 out), from the host half of this bench, bench_gpu_moe_w4a8.cpp.
//
//   bench_gpu_moe_w4a8 [--quick] [--tune FILE] [--out DIR] [--profile] [--peer-only] [--shape NAME]
//                      [--decode LIST] [--prefill LIST] [--routing FILE] [--config NAME] [--settled] [--no-peer]
//     --tune FILE  sweep every tile config for every shape / token count / routing and write the dispatch table
//                  (src/kernels/cuda/moe_w4a8_dispatch_table.inc format) to FILE; the committed table merges several
//                  runs' sweep lines (tools/w4a8_table_from_sweeps.py, --settled runs for the decode chain's entries)
//     --profile    one decode and one prefill launch of each kernel only (for ncu)
//     --peer-only  time the cuBLASLt peer only (no W4A8 timing, no tuning, no glue kernels)
//     --no-peer    W4A8 only: no cuBLASLt peer, no glue kernels (A/Bs of W4A8 builds, where only its times matter)
//     --shape NAME one shape only (pro_w13, pro_w2, flash_w13, flash_w2)
//     --decode / --prefill LIST  the token counts of that phase, e.g. 1,4 ("-": none)
//     --routing FILE  also route with a recorded run's load shares (`moeserve generate --routing-histogram FILE`,
//                  model/routing_histogram.h: each scored layer's sorted expert shares, resampled to the shape's E)
//     --config NAME  time (and --profile) that tile config instead of the dispatch table's pick
//     --timeline   after timing each uniform-routing case, print when the CTAs of its last launch reached the points
//                  of a launch (moe_w4a8_timeline; only a build with the timeline probe, PROBES=16
//                  scripts/device-prepare.sh -> bench_gpu_moe_w4a8_p16, records them)
//     --static     launches take their work items in the fixed order instead of from a counter
//                  (MoeW4A8Chain::item_counter, as the engine does); also MOESERVE_W4A8_DYNAMIC=0, the engine's
//                  switch, for scripts/device-w4a8-ab.sh
//     --settled    decode launches take the decode chain's settled path (MoeW4A8Chain::counts_settled: the counts
//                  were written before the previous kernel started, as W2's are in the engine's decode step and as
//                  W13's expert ids are): schedule and first weight stages before griddepcontrol.wait, so that a
//                  launch's prologue overlaps the previous launch. Without it every launch waits for the previous
//                  one to finish before it reads its counts.
//
// Decode (1..256 tokens, masked layout, cap = tokens): achieved weight-read bandwidth = bytes of the touched
// experts' FP4 weights and E8M0 scales / time, against the GPU's copy bandwidth (bench/ceilings.json; the H200's 4.28
// TB/s). Prefill (4K..32K tokens, contiguous layout): FP8 TFLOP/s = 2 * tokens * 6 * N * K / time, against its fp8
// GEMM peak (the H200's 1418). Timing: CUDA events around graph replays, warm-up,
// median of repeats; decode rotates 8 routings so the touched experts change between launches (the weights of
// the rotated sets exceed the 60 MB L2), prefill inputs exceed L2 by themselves.
// The peer reads FP8 weights, 2x the MXFP4 bytes (plus fp32 128x128 block scales instead of E8M0 1x32 ones): its
// decode bandwidth counts its own bytes (both byte counts per expert are printed per shape); its prefill TFLOP/s
// counts the same useful FLOPs (rows it pads are not counted). Its output is fp32 (the wrapper's), W4A8's bf16.
// Where cuBLASLt has no algorithm for an expert's row count n, the peer pads n to 16, then 128 rows, and says so.
// The dispatch table's keys are routed slots (tokens x 6): one entry per token count the tuner times (decode
// 1, 2, 4, ..., 256 unless --decode says otherwise; prefill 4K, 16K, 32K), each the config fastest over top-6
// routing of uniform and Zipf(1.1) token->expert distributions, and with --routing FILE a recorded run's load
// shares (no V4 run has been recorded yet: the demo model's is the only one available here).
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

#include "core/env.h"
#include "graph_timing.h"
#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_w4a8.h"

// Defined in bench_gpu_moe_w4a8.cpp (cuda::Blas lives in kernels/cuda/runtime.h, C++20 and g++ only).
namespace moeserve::bench_moe_w4a8 {
struct LtGemm;
LtGemm* lt_gemm_create(std::string* error);
void lt_gemm_destroy(LtGemm* g);
// cuda::Blas::gemm_fp8_block(x, x_scales, w, w_scales, y, M, N, K, ldy = N, stream): 1 enqueued, 0 no algorithm
// for the shape (nothing enqueued), -1 cuBLASLt failed (*error).
int lt_gemm_fp8_block(LtGemm* g, const uint8_t* x, const float* x_scales, const uint8_t* w, const float* w_scales,
                      float* y, int M, int N, int K, cudaStream_t stream, std::string* error);
bool recorded_load_shares(const std::string& path, int E, std::vector<double>* shares, std::string* error);
}  // namespace moeserve::bench_moe_w4a8

namespace {

using namespace moeserve;
namespace pack = moeserve::kernels::cpu;

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
__global__ void fill_float_kernel(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}
// bf16 values uniform in [-2, 2): activations of ordinary magnitude (random bytes would make half of them below
// 2^-63 and some subnormal, which sends fp32 divisions down their slow path).
__global__ void fill_bf16_kernel(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(mix(seed ^ i) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = uint16_t(__float_as_uint(4.0f * u - 2.0f) >> 16);
  }
}
void fill_bf16(uint16_t* p, size_t n, uint64_t seed) {
  fill_bf16_kernel<<<2048, 256>>>(p, n, seed);
  CK(cudaGetLastError());
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

// Top-6 distinct experts per token, drawn with the experts' weights (uniform, Zipf(1.1), or a recorded run's load
// shares: routing_weights) over a random permutation of the experts.
std::vector<int> route_counts(std::mt19937& rng, int T, std::vector<double> w) {
  const int E = int(w.size());
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

// Median time (ms) of one call, from `batch` calls (call(i) for i = 0..batch-1) captured in a graph. soft: a
// capture or launch error returns -1 (after a message) instead of ending the bench.
float time_calls(const std::function<void(int, cudaStream_t)>& call, int batch, int reps, cudaStream_t stream,
                 bool soft = false) {
  auto failed = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return false;
    if (!soft) {
      std::fprintf(stderr, "CUDA error %s in %s\n", cudaGetErrorString(e), what);
      std::exit(1);
    }
    std::fprintf(stderr, "peer timing: %s: %s\n", what, cudaGetErrorString(e));
    cudaGetLastError();
    return true;
  };
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < batch; ++i) call(i, stream);
  if (failed(cudaStreamEndCapture(stream, &graph), "graph capture")) {
    if (graph) cudaGraphDestroy(graph);
    return -1;
  }
  if (failed(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate")) {
    cudaGraphDestroy(graph);
    return -1;
  }
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  bool bad = false;
  for (int w = 0; w < 2 && !bad; ++w) bad = failed(cudaGraphLaunch(exec, stream), "graph launch");
  for (int r = 0; r < reps && !bad; ++r) {
    CK(cudaEventRecord(a, stream));
    bad = failed(cudaGraphLaunch(exec, stream), "graph launch");
    CK(cudaEventRecord(b, stream));
    bad |= failed(cudaEventSynchronize(b), "graph run");
    float ms = 0;
    if (!bad) CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / batch);
  }
  bad |= failed(cudaGetLastError(), "graph run");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return bad ? -1 : median(t);
}

// One line per timed case from the timeline probe (moe_w4a8_timeline): each point of the last launch, in us after its
// first CTA started, as min / median / max over its CTAs; then, from the earliest return of griddepcontrol.wait (the
// previous launch complete), the median first landing, the median and last end of the main loops and the last end:
// what the launch adds to a chain. (CTAs start early, while the previous launch drains: PDL.)
void print_timeline(const char* shape, const char* phase, int T, const std::string& cfg,
                    const std::vector<uint64_t>& ev) {
  constexpr int kE = cuda::kMoeW4A8TimelineEvents;
  const int slots = int(ev.size()) / kE;
  uint64_t t0 = UINT64_MAX;
  for (int c = 0; c < slots; ++c)
    if (ev[size_t(c) * kE + cuda::kTlStart]) t0 = std::min(t0, ev[size_t(c) * kE + cuda::kTlStart]);
  if (t0 == UINT64_MAX) return;
  const char* names[kE] = {"start", "wait", "scheduled", "first issued", "first landed", "loop done", "end"};
  std::string line;
  int ctas = 0;
  std::vector<std::vector<double>> at(kE);  // per event, us after t0, sorted
  for (int k = 0; k < kE; ++k) {
    for (int c = 0; c < slots; ++c) {
      const uint64_t* e = &ev[size_t(c) * kE];
      if (e[cuda::kTlStart] && e[k]) at[k].push_back((double(e[k]) - double(t0)) * 1e-3);
    }
    std::sort(at[k].begin(), at[k].end());
    if (k == cuda::kTlStart) ctas = int(at[k].size());
    if (at[k].empty()) continue;
    char part[96];
    std::snprintf(part, sizeof part, "  %s %.2f/%.2f/%.2f", names[k], at[k].front(), at[k][at[k].size() / 2],
                  at[k].back());
    line += part;
  }
  auto med = [&](int k) { return at[k].empty() ? 0.0 : at[k][at[k].size() / 2]; };
  auto last = [&](int k) { return at[k].empty() ? 0.0 : at[k].back(); };
  const double w = at[cuda::kTlWait].empty() ? 0.0 : at[cuda::kTlWait].front();
  std::printf("timeline %-9s %-7s T=%-5d [%s] %d CTAs, us after the first start (min/median/max):%s;  after the first "
              "wait: first landed %.2f (median), loops done %.2f (median) / %.2f (last), last end %.2f\n",
              shape, phase, T, cfg.c_str(), ctas, line.c_str(), med(cuda::kTlFirstLanded) - w,
              med(cuda::kTlLoopDone) - w, last(cuda::kTlLoopDone) - w, last(cuda::kTlEnd) - w);
}

// "1,4,16" -> {1, 4, 16}; "-" -> {} (skip that phase). Exits on anything else.
std::vector<int> parse_counts(const std::string& list) {
  std::vector<int> out;
  if (list == "-") return out;
  for (const std::string& item : bench::comma_items(list)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 1 << 20) {
      std::fprintf(stderr, "bench_gpu_moe_w4a8: token counts must be a comma-separated list of 1..%d, got '%s'\n",
                   1 << 20, list.c_str());
      std::exit(2);
    }
    out.push_back(int(v));
  }
  return out;
}

std::string fmt_us(double us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", us);
  return b;
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// The sweep's split candidates (cuda::MoeW4A8Split): a wide tile for the experts above 1x, 2x or 4x the table
// config's token tile.
const std::vector<const char*> kSplitBig = {"bn32_wg2_g2_s7", "bn64_wg2_g1_s8", "bn128_wg2_g1_s5_pf"};
constexpr int kSplitRows = 3;

std::string split_name(int config, const cuda::MoeW4A8Split& split) {
  std::string name = cuda::moe_w4a8_config(config).name;
  if (split.config >= 0) name += std::string("+") + cuda::moe_w4a8_config(split.config).name + ">" + std::to_string(split.rows);
  return name;
}

// The tuning vector's entry c: configs [0, config_count), then split b * kSplitRows + r of the table's config
// `pick`, kSplitBig[b] above pick's token tile << r rows (config -1 when c names a config alone).
cuda::MoeW4A8Split split_candidate(int c, int pick) {
  const int s = c - cuda::moe_w4a8_config_count();
  if (s < 0) return {};
  return {cuda::moe_w4a8_config_by_name(kSplitBig[size_t(s / kSplitRows)]),
          cuda::moe_w4a8_config(pick).block_tokens << (s % kSplitRows)};
}

// Name of the tuning vector's entry c.
std::string candidate_name(int c, int pick) {
  return c < cuda::moe_w4a8_config_count() ? cuda::moe_w4a8_config(c).name : split_name(pick, split_candidate(c, pick));
}

// ---------------------------------------------------------------------------------------------------------
// cuBLASLt peer: per-expert block-scaled FP8 GEMMs through cuda::Blas::gemm_fp8_block, the configuration the
// CUDA backend runs on the H200 (CudaGemm.CublasLtBf16AndFp8BlockScaled). Column-major view: A = the expert's W
// as K x N (op T, BLK128x128 fp32 scales), B = its rows of X as K x M (op N, VEC128 fp32 scales), D = N x M fp32
// (ld N), i.e. y[M][N] = X W^T; compute 32F.
// Weights FP8 [E][N][K] with scales [E][ceil(N/128)][round_up(K/128, 4)]; activations FP8, one block of rows per
// active expert at a row offset rounded up to 4, with scales [K/128][M] at the same row offset (x K/128).
// ---------------------------------------------------------------------------------------------------------
namespace lt = moeserve::bench_moe_w4a8;

struct LtPeer {
  lt::LtGemm* g = nullptr;
  std::string error;                                      // why the peer does not run at all
  std::map<std::tuple<int, int, int>, int> rows_for;      // (n, N, K) -> M given to cuBLASLt; 0: none works
  std::map<std::string, int> notes;                       // distinct messages, printed once at the end

  struct Buffers {
    uint8_t* x = nullptr;  // [rows][K] FP8
    float* xs = nullptr;   // [rows][K/128] floats (per-expert [K/128][M] blocks)
    float* y = nullptr;    // [rows][N] fp32
    size_t rows = 0;
  };
  // What one enqueue did (over the calls it made): padded calls and their n -> M.
  struct Stats {
    int calls = 0, padded = 0;
    std::map<int, int> pads;
  };

  explicit LtPeer(bool on) {
    if (on) g = lt::lt_gemm_create(&error);
    else error = "--no-peer";
  }
  ~LtPeer() {
    if (g) lt::lt_gemm_destroy(g);
  }
  LtPeer(const LtPeer&) = delete;
  LtPeer& operator=(const LtPeer&) = delete;
  bool usable() const { return g != nullptr; }

  // Rows of the peer's buffers that cover `counts` whatever padding it picks (each row offset <= n rounded to 128).
  static size_t rows_bound(const std::vector<int>& counts) {
    size_t r = 0;
    for (int n : counts)
      if (n > 0) r += size_t(round_up(n, 128));
    return r;
  }

  static size_t wscale_per_expert(int N, int K) { return size_t((N + 127) / 128) * round_up((K + 127) / 128, 4); }

  // One gemm_fp8_block call per expert with n > 0 rows, M = n or, where cuBLASLt has no algorithm for n (or fails),
  // n padded to 16, then 128. resolve: unplanned row counts may be tried (each successful try is the expert's GEMM,
  // so only outside graph capture); without it they fail. False when some expert's GEMM did not run.
  bool enqueue(const std::vector<int>& counts, int N, int K, const uint8_t* w8, const float* wscale, const Buffers& b,
               bool resolve, cudaStream_t stream, Stats* stats) {
    if (!g) return false;
    size_t row = 0;
    const size_t wse = wscale_per_expert(N, K);
    for (size_t e = 0; e < counts.size(); ++e) {
      const int n = counts[e];
      if (n <= 0) continue;
      const uint8_t* we = w8 + e * size_t(N) * K;
      const float* ws = wscale + e * wse;
      auto call = [&](int M, std::string* err) {
        if (row + size_t(round_up(M, 4)) > b.rows) {
          *err = "peer buffers too small";
          return -1;
        }
        return lt::lt_gemm_fp8_block(g, b.x + row * K, b.xs + row * size_t(K / 128), we, ws, b.y + row * N, M, N, K,
                                     stream, err);
      };
      const auto key = std::make_tuple(n, N, K);
      auto it = rows_for.find(key);
      int M = -1;
      if (it != rows_for.end()) {
        M = it->second;
        if (M == 0) return false;
        std::string err;
        const int st = call(M, &err);
        if (st != 1) {
          notes["cuBLASLt: M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + ": " +
                (st == 0 ? std::string("no algorithm on a later call") : err)]++;
          return false;
        }
      } else {
        if (!resolve) return false;
        std::vector<int> tries = {n, round_up(n, 16), round_up(n, 128)};
        tries.erase(std::unique(tries.begin(), tries.end()), tries.end());
        M = 0;
        for (int m : tries) {
          std::string err;
          const int st = call(m, &err);
          if (st == 1) {
            M = m;
            break;
          }
          notes["cuBLASLt: M=" + std::to_string(m) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + ": " +
                (st == 0 ? std::string("no block-scaled FP8 algorithm") : err)]++;
        }
        rows_for[key] = M;  // padded row counts show on the bench's lines
        if (M == 0) return false;
      }
      if (stats) {
        stats->calls++;
        if (M != n) {
          stats->padded++;
          stats->pads[n] = M;
        }
      }
      row += size_t(round_up(M, 4));
    }
    return true;
  }
};

// ---------------------------------------------------------------------------------------------------------
struct Result {
  std::string shape, phase, dist;
  int T;
  double best_ms, pick_ms, peer_ms;  // peer_ms <= 0: the peer did not run
  std::string best_cfg, pick_cfg;
  double metric_best, metric_pick, frac_pick;  // TB/s or TFLOP/s; pick / ceiling
  double peer_metric, peer_frac, ratio;        // the peer's TB/s (its own FP8 bytes) or TFLOP/s; / ceiling;
                                               // W4A8 time / peer time (0: n/a)
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, profile = false, peer_only = false, settled = false, timeline = false, dynamic = true;
  bool no_peer = false;
  std::string tune_file, out_dir, only_shape, decode_list, prefill_list, routing_file, force_config;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--profile") profile = true;
    else if (a == "--peer-only") peer_only = true;
    else if (a == "--no-peer") no_peer = true;
    else if (a == "--settled") settled = true;
    else if (a == "--timeline") timeline = true;
    else if (a == "--static") dynamic = false;
    else if (a == "--tune" && i + 1 < argc) tune_file = argv[++i];
    else if (a == "--out" && i + 1 < argc) out_dir = argv[++i];
    else if (a == "--shape" && i + 1 < argc) only_shape = argv[++i];
    else if (a == "--decode" && i + 1 < argc) decode_list = argv[++i];
    else if (a == "--prefill" && i + 1 < argc) prefill_list = argv[++i];
    else if (a == "--routing" && i + 1 < argc) routing_file = argv[++i];
    else if (a == "--config" && i + 1 < argc) force_config = argv[++i];
    else {
      std::fprintf(stderr, "bench_gpu_moe_w4a8: unknown argument '%s' (see the usage at the top of the source)\n",
                   a.c_str());
      return 2;
    }
  }
  if (no_peer && peer_only) {
    std::fprintf(stderr, "bench_gpu_moe_w4a8: --no-peer and --peer-only exclude each other\n");
    return 2;
  }
  if (!routing_file.empty()) {  // a bad file is an error with or without a GPU
    std::vector<double> probe;
    std::string error;
    if (!lt::recorded_load_shares(routing_file, 8, &probe, &error)) {
      std::fprintf(stderr, "bench_gpu_moe_w4a8: --routing %s: %s\n", routing_file.c_str(), error.c_str());
      return 2;
    }
  }
  if (!force_config.empty() && cuda::moe_w4a8_config_by_name(force_config.c_str()) < 0) {
    std::fprintf(stderr, "bench_gpu_moe_w4a8: --config %s: no such tile config\n", force_config.c_str());
    return 2;
  }
  if (!cuda::available()) {
    std::printf("bench_gpu_moe_w4a8: skipped (%s)\n", cuda::device_info().reason.c_str());
    return 0;
  }
  const std::string gpu = cuda::device_info().name;
  std::printf("GPU: %s, %d SMs, L2 %zu MB\n", gpu.c_str(), cuda::device_info().multiprocessors,
              cuda::device_info().l2_bytes >> 20);
  const auto& roofs = bench::gpu_ceilings(gpu);
  const double copy_tbs = roofs.copy_bytes_per_s / 1e12, fp8_tflops = roofs.fp8_flops_per_s / 1e12;
  const bool sweep = !tune_file.empty() && !peer_only;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  LtPeer lt(!no_peer);
  if (lt.usable())
    std::printf("peer cublasLt-fp8: cuda::Blas::gemm_fp8_block per active expert (FP8 e4m3 weights, BLK128x128 fp32 "
                "scales; FP8 activations, VEC128 fp32 scales; fp32 out), all in one CUDA graph\n");
  else
    std::printf("peer cublasLt-fp8: unavailable (%s)\n", lt.error.c_str());
  if (settled) std::printf("decode: settled counts (MoeW4A8Chain::counts_settled), the decode chain's W2 path\n");
  if (env_is("MOESERVE_W4A8_DYNAMIC", "0")) dynamic = false;  // the engine's switch (GpuModel)
  cuda::MoeW4A8Chain decode_chain, prefill_chain;
  decode_chain.counts_settled = settled;
  if (dynamic) {
    int* counter = dalloc<int>(1);
    CK(cudaMemset(counter, 0, sizeof(int)));
    decode_chain.item_counter = prefill_chain.item_counter = counter;
    std::printf("work items from a counter (MoeW4A8Chain::item_counter)\n");
  } else {
    std::printf("work items in the fixed order (--static)\n");
  }
  std::mt19937 rng(12345);
  // Routings: uniform and Zipf(1.1) always; with --routing FILE also a recorded run's load shares.
  std::vector<std::string> routings = {"uniform", "zipf"};
  if (!routing_file.empty()) routings.push_back("recorded");
  std::map<int, std::vector<double>> recorded_shares;  // by expert count
  auto routing_weights = [&](const std::string& kind, int E) {
    std::vector<double> w(E, 1.0);
    if (kind == "zipf")
      for (int e = 0; e < E; ++e) w[e] = 1.0 / std::pow(double(e + 1), 1.1);
    if (kind == "recorded") {
      auto it = recorded_shares.find(E);
      if (it == recorded_shares.end()) {
        std::string error;
        if (!lt::recorded_load_shares(routing_file, E, &w, &error)) std::abort();  // the file was read above
        it = recorded_shares.emplace(E, w).first;
      }
      w = it->second;
    }
    return w;
  };

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
  if (sweep) decode_T = {1, 2, 4, 8, 16, 32, 64, 128, 256};  // every power of two: each is a dispatch key
  if (!decode_list.empty()) decode_T = parse_counts(decode_list);
  if (!prefill_list.empty()) prefill_T = parse_counts(prefill_list);
  const int R = 8;  // decode routings rotated per timing batch
  std::vector<Result> results;
  // tuning: per (shape, routed slots, config) summed relative time over the routings
  std::map<std::pair<std::string, int>, std::vector<double>> tune_acc;
  std::map<std::pair<std::string, int>, int> tune_pick;  // the table's config of each key when the sweep ran

  for (const Shape& sh : kShapes) {
    if (!only_shape.empty() ? only_shape != sh.name : profile && std::strcmp(sh.name, "pro_w13") != 0) continue;
    const int E = sh.E, N = sh.N, K = sh.K;
    const size_t wbytes = pack::moe_w4a8_packed_expert_bytes(N, K) * E;
    uint8_t* w = dalloc<uint8_t>(wbytes);
    uint64_t* flags = dalloc<uint64_t>(pack::moe_w4a8_flag_expert_words(N, K) * E);
    CK(cuda::moe_w4a8_fill_random(w, E, N, K, 122, 4, 1, nullptr));  // exponents 118..122 below each row's R
    CK(cudaMemset(flags, 0, pack::moe_w4a8_flag_expert_words(N, K) * E * 8));
    // Peer weights: FP8 [E][N][K] (|v| < 2, no NaN) with 128x128 block scales [E][ceil(N/128)][round_up(K/128, 4)].
    // (None without the peer: 17 GB at V4-Pro W13.)
    uint8_t* w8 = nullptr;
    float* wscale = nullptr;
    if (lt.usable()) {
      const size_t w8bytes = size_t(E) * N * K, wsn = size_t(E) * LtPeer::wscale_per_expert(N, K);
      w8 = dalloc<uint8_t>(w8bytes);
      fill_bytes(w8, w8bytes, 3, 0xbf);
      wscale = dalloc<float>(wsn);
      fill_float(wscale, wsn, 1.0f / 64);
    }
    cuda::MoeW4A8Weights W{w, flags, E, N, K};
    const double expert_bytes = double(N) * K * (0.5 + 1.0 / 32);
    const double peer_expert_bytes = double(N) * K + 4.0 * double(LtPeer::wscale_per_expert(N, K));
    std::printf("%-9s E=%d N=%d K=%d  weight bytes per expert: w4a8 %.2f MB (MXFP4 %.2f + E8M0 %.2f), cublasLt-fp8 "
                "%.2f MB (FP8 %.2f = 2x MXFP4 + fp32 block scales %.3f) = %.2fx\n",
                sh.name, E, N, K, expert_bytes / 1e6, double(N) * K * 0.5 / 1e6, double(N) * K / 32 / 1e6,
                peer_expert_bytes / 1e6, double(N) * K / 1e6, 4.0 * double(LtPeer::wscale_per_expert(N, K)) / 1e6,
                peer_expert_bytes / expert_bytes);

    for (int phase = 0; phase < 2; ++phase) {
      const bool decode = phase == 0;
      for (int T : decode ? decode_T : prefill_T) {
        const int cap = T;
        const int rows = decode ? E * cap : T * kTopk;
        const int sa_ld = (rows + 3) / 4 * 4;
        uint8_t* a = dalloc<uint8_t>(size_t(rows) * K);
        float* sa = dalloc<float>(size_t(K / 128) * sa_ld);
        uint16_t* y = dalloc<uint16_t>(size_t(rows) * N);
        fill_bytes(a, size_t(rows) * K, 5 + T, 0xbf);
        fill_float(sa, size_t(K / 128) * sa_ld, 0.125f);
        cuda::MoeW4A8Input in{a, sa, rows, sa_ld};
        const int slots = T * kTopk;  // the dispatch key (moe_w4a8_pick_config)
        for (size_t rk = 0; rk < routings.size(); ++rk) {
          const char* routing = routings[rk].c_str();
          const std::vector<double> weights = routing_weights(routings[rk], E);
          const int nsets = decode ? R : 1;
          std::vector<std::vector<int>> sets;
          std::vector<int*> dcounts;
          double touched = 0;
          for (int s = 0; s < nsets; ++s) {
            sets.push_back(route_counts(rng, T, weights));
            int* dc = dalloc<int>(E);
            CK(cudaMemcpy(dc, sets.back().data(), E * sizeof(int), cudaMemcpyHostToDevice));
            dcounts.push_back(dc);
            for (int c : sets.back()) touched += c > 0 ? 1 : 0;
          }
          touched /= nsets;
          // Peer buffers for these routings: activations, their scales and the fp32 output, with rows for any padding.
          LtPeer::Buffers pb;
          if (lt.usable()) {
            for (const auto& c : sets) pb.rows = std::max(pb.rows, LtPeer::rows_bound(c));
            pb.x = dalloc<uint8_t>(pb.rows * K);
            pb.xs = dalloc<float>(pb.rows * (K / 128));
            pb.y = dalloc<float>(pb.rows * N);
            fill_bytes(pb.x, pb.rows * K, 11 + T, 0xbf);
            fill_float(pb.xs, pb.rows * (K / 128), 0.125f);
            CK(cudaDeviceSynchronize());  // the fills ran on the legacy stream, the peer runs on `stream`
          }
          auto free_sets = [&] {
            for (int* p : dcounts) cudaFree(p);
            cudaFree(pb.x);
            cudaFree(pb.xs);
            cudaFree(pb.y);
          };
          const int batch = decode ? R : 1;
          const int reps = quick || profile ? 3 : 5;
          auto run = [&](int cfg, int reps, cuda::MoeW4A8Split split = {}) {
            return time_calls(
                [&](int i, cudaStream_t st) {
                  cudaError_t err = decode ? cuda::moe_grouped_gemm_w4a8_masked(W, in, dcounts[i % nsets], cap, y,
                                                                               cuda::MoeOutType::BF16, slots, cfg, st,
                                                                               decode_chain, split)
                                           : cuda::moe_grouped_gemm_w4a8_contiguous(W, in, dcounts[i % nsets], y,
                                                                                   cuda::MoeOutType::BF16, slots, cfg, st,
                                                                                   prefill_chain, split);
                  CK(err);
                },
                batch, reps, stream);
          };
          const int pick = force_config.empty() ? cuda::moe_w4a8_pick_config(E, N, K, slots)
                                                : cuda::moe_w4a8_config_by_name(force_config.c_str());
          if (profile) {  // one plain launch of each kernel, for ncu
            if (rk == 0) {
              if (!peer_only)
                CK(decode ? cuda::moe_grouped_gemm_w4a8_masked(W, in, dcounts[0], cap, y, cuda::MoeOutType::BF16,
                                                                slots, pick, stream, decode_chain)
                          : cuda::moe_grouped_gemm_w4a8_contiguous(W, in, dcounts[0], y, cuda::MoeOutType::BF16,
                                                                    slots, pick, stream));
              if (lt.usable()) lt.enqueue(sets[0], N, K, w8, wscale, pb, true, stream, nullptr);
              CK(cudaStreamSynchronize(stream));
              std::printf("profile: %s %s T=%d config %s\n", sh.name, decode ? "decode" : "prefill", T,
                          cuda::moe_w4a8_config(pick).name);
            }
            free_sets();
            continue;
          }
          Result res{sh.name, decode ? "decode" : "prefill", routing, T, 0, 0, 0, "", "", 0, 0, 0, 0, 0, 0};
          const cuda::MoeW4A8Split pick_split =
              force_config.empty() ? cuda::moe_w4a8_pick_split(E, N, K, slots) : cuda::MoeW4A8Split{};
          std::vector<uint64_t> events;
          const bool tl = timeline && !peer_only && rk == 0 && cuda::moe_w4a8_timeline(&events) > 0;  // cleared
          if (!peer_only) res.pick_ms = run(pick, reps, pick_split);
          res.pick_cfg = split_name(pick, pick_split);
          if (tl && cuda::moe_w4a8_timeline(&events) > 0)
            print_timeline(sh.name, decode ? "decode" : "prefill", T, res.pick_cfg, events);
          res.best_ms = res.pick_ms;
          res.best_cfg = res.pick_cfg;
          if (sweep) {
            std::vector<double> t(cuda::moe_w4a8_config_count());
            for (int c = 0; c < cuda::moe_w4a8_config_count(); ++c) {
              // Skip the hopeless corners to keep the sweep short: token tiles far smaller than the rows of an
              // expert (prefill) or far larger (small decode batches) are never the fastest.
              const int bt = cuda::moe_w4a8_config(c).block_tokens;
              if (!cuda::moe_w4a8_config_fits(c, N, K) ||
                  (c != pick && ((!decode && bt < 32) || (decode && T <= 64 && bt > 32)))) {
                t[c] = 1e30;
                continue;
              }
              // The pick's own time is the config alone only when the table gives it no split: with one, res.pick_ms
              // timed the split, and naming that time after the bare config made the tuner drop splits that won.
              t[c] = c == pick && pick_split.config < 0 ? res.pick_ms : run(c, 3);
              if (t[c] < res.best_ms) {
                res.best_ms = t[c];
                res.best_cfg = cuda::moe_w4a8_config(c).name;
              }
            }
            // Splits by expert load (decode from 16 tokens): the table's config for the small experts, each wide
            // tile for those above a row threshold (split_candidate).
            const int singles = cuda::moe_w4a8_config_count();
            t.resize(singles + kSplitBig.size() * kSplitRows, 1e30);
            if (decode && T >= 16) {
              for (size_t c = size_t(singles); c < t.size(); ++c) {
                const cuda::MoeW4A8Split sp = split_candidate(int(c), pick);
                if (sp.config < 0 || !cuda::moe_w4a8_config_fits(sp.config, N, K)) continue;
                t[c] = run(pick, 3, sp);
                if (t[c] < res.best_ms) {
                  res.best_ms = t[c];
                  res.best_cfg = split_name(pick, sp);
                }
              }
            }
            tune_pick[{sh.name, slots}] = pick;
            std::string line;  // every timed config of this case, for reading the sweep
            for (size_t c = 0; c < t.size(); ++c)
              if (t[c] < 1e29) line += " " + candidate_name(int(c), pick) + "=" + fmt_us(t[c] * 1e3);
            std::printf("  sweep %s %s %s T=%d:%s\n", sh.name, decode ? "decode" : "prefill", routing,
                        T, line.c_str());
            auto& acc = tune_acc[{sh.name, slots}];
            acc.resize(t.size(), 0.0);
            const double best = *std::min_element(t.begin(), t.end());
            for (size_t c = 0; c < t.size(); ++c) acc[c] += std::min(t[c] / best, 100.0);
          }
          // Peer: the same routings (decode: the same rotated sets, active experts only), one cuBLASLt call per
          // active expert. An uncaptured pass first picks each row count's M (padding where cuBLASLt needs it) and
          // checks every call; then the calls of `batch` routings are captured in one graph and timed.
          LtPeer::Stats ps;
          double peer = -1;
          if (lt.usable()) {
            bool ok = true;
            for (int s = 0; s < nsets && ok; ++s) ok = lt.enqueue(sets[s], N, K, w8, wscale, pb, true, stream, &ps);
            CK(cudaStreamSynchronize(stream));
            if (ok) {
              bool captured = true;
              peer = time_calls(
                  [&](int i, cudaStream_t st) {
                    if (!lt.enqueue(sets[i % nsets], N, K, w8, wscale, pb, false, st, nullptr)) captured = false;
                  },
                  batch, reps, stream, /*soft=*/true);
              if (!captured) peer = -1;
            }
          }
          res.peer_ms = peer;
          const double bytes = touched * expert_bytes, peer_bytes = touched * peer_expert_bytes;
          const double flops = 2.0 * T * kTopk * double(N) * K;  // useful FLOPs (the peer's padded rows not counted)
          const double work = decode ? bytes : flops, ceiling = decode ? copy_tbs : fp8_tflops;
          if (!peer_only) {
            res.metric_best = work / (res.best_ms * 1e-3) / 1e12;
            res.metric_pick = work / (res.pick_ms * 1e-3) / 1e12;
            res.frac_pick = res.metric_pick / ceiling;
          }
          if (peer > 0) {
            res.peer_metric = (decode ? peer_bytes : flops) / (peer * 1e-3) / 1e12;
            res.peer_frac = res.peer_metric / ceiling;
            if (!peer_only) res.ratio = res.pick_ms / peer;
          }
          const char* unit = decode ? "TB/s" : "TFLOP/s";
          char w4a8[256] = "", peer_s[128], ratio_s[64] = "";
          if (!peer_only)
            std::snprintf(w4a8, sizeof w4a8, "w4a8 %9.1f us [%s] %7.3f %s (%4.1f%%)  best %9.1f us [%s]  ",
                          res.pick_ms * 1e3, res.pick_cfg.c_str(), res.metric_pick, unit, 100 * res.frac_pick,
                          res.best_ms * 1e3, res.best_cfg.c_str());
          if (peer > 0)
            std::snprintf(peer_s, sizeof peer_s, "cublasLt-fp8 %9.1f us %7.3f %s (%4.1f%%)", peer * 1e3,
                          res.peer_metric, unit, 100 * res.peer_frac);
          else
            std::snprintf(peer_s, sizeof peer_s, "cublasLt-fp8       n/a");
          if (!peer_only) {
            if (res.ratio > 0) std::snprintf(ratio_s, sizeof ratio_s, "  w4a8/peer %.2fx", res.ratio);
            else std::snprintf(ratio_s, sizeof ratio_s, "  w4a8/peer n/a");
          }
          std::string pad;
          if (ps.padded > 0) {  // rows the peer padded for cuBLASLt (n -> M), over the untimed pass's calls
            pad = "  [peer rows padded in " + std::to_string(ps.padded) + "/" + std::to_string(ps.calls) + " calls:";
            int shown = 0;
            for (const auto& [n, m] : ps.pads) {
              if (shown++ == 4) {
                pad += " ...";
                break;
              }
              pad += " " + std::to_string(n) + "->" + std::to_string(m);
            }
            pad += "]";
          }
          std::printf("%-9s %-7s %-7s T=%-5d experts=%6.1f  %s%s%s%s\n", sh.name, res.phase.c_str(), res.dist.c_str(),
                      T, touched, w4a8, peer_s, ratio_s, pad.c_str());
          std::fflush(stdout);
          results.push_back(res);
          free_sets();
        }
        cudaFree(a);
        cudaFree(sa);
        cudaFree(y);
      }
    }
    cudaFree(w);
    cudaFree(flags);
    cudaFree(w8);
    cudaFree(wscale);
  }
  for (const auto& [note, count] : lt.notes)
    std::printf("note: %s%s\n", note.c_str(), count > 1 ? (" (x" + std::to_string(count) + ")").c_str() : "");

  // Glue kernels at a decode and a prefill size (Pro dims).
  if (!profile && !peer_only && !no_peer) {
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
      fill_bf16(x, size_t(T) * D, 7);
      fill_bf16(h, size_t(rows) * 2 * I, 8);
      fill_bf16(y2, size_t(rows) * D, 9);
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
        "// {gpu name, E, N, K, largest routed slots (tokens x 6) of the entry, config name, split config name or\n"
        "// nullptr, split rows}: the config (and MoeW4A8Split: experts of more rows on the split config) fastest over\n"
        "// top-6 routing of uniform and Zipf(1.1) token->expert distributions" +
        std::string(routing_file.empty() ? "" : " and a recorded run's load shares (" + routing_file + ")") +
        " at the entry's token count.\n";
    for (const Shape& sh : kShapes) {
      std::vector<std::pair<int, std::string>> rows;
      for (const auto& [key, acc] : tune_acc) {
        if (key.first != sh.name) continue;
        const int best = int(std::min_element(acc.begin(), acc.end()) - acc.begin());
        std::string entry;  // "config", "split config" or nullptr, split rows
        if (best < cuda::moe_w4a8_config_count()) {
          entry = std::string("\"") + cuda::moe_w4a8_config(best).name + "\", nullptr, 0";
        } else {
          const int pick = tune_pick.at(key);
          const cuda::MoeW4A8Split sp = split_candidate(best, pick);
          entry = std::string("\"") + cuda::moe_w4a8_config(pick).name + "\", \"" + cuda::moe_w4a8_config(sp.config).name +
                  "\", " + std::to_string(sp.rows);
        }
        rows.push_back({key.second, entry});
      }
      std::sort(rows.begin(), rows.end());
      for (size_t i = 0; i < rows.size(); ++i) {
        char line[320];
        const bool last = i + 1 == rows.size();
        std::snprintf(line, sizeof line, "{\"%s\", %d, %d, %d, %s, %s},\n", gpu.c_str(), sh.E, sh.N, sh.K,
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

  // Summary line: best decode bandwidth fraction and best prefill TFLOP fraction, with W4A8 time / peer time there
  // (--peer-only: the peer's own best fractions).
  double dec_best = 0, pre_best = 0, dec_ratio = 0, pre_ratio = 0;
  std::string dec_at = "-", pre_at = "-";
  for (const Result& r : results) {
    const double f = peer_only ? r.peer_frac : r.frac_pick;
    if (r.phase == "decode" && f > dec_best) {
      dec_best = f;
      dec_ratio = r.ratio;
      dec_at = r.shape + " T=" + std::to_string(r.T);
    }
    if (r.phase == "prefill" && f > pre_best) {
      pre_best = f;
      pre_ratio = r.ratio;
      pre_at = r.shape + " T=" + std::to_string(r.T);
    }
  }
  auto ratio_str = [](double x) {
    char b[32];
    if (x > 0) std::snprintf(b, sizeof b, "%.2fx", x);
    else std::snprintf(b, sizeof b, "n/a");
    return std::string(b);
  };
  if (peer_only)
    std::printf("moe_w4a8 --peer-only: cublasLt-fp8 decode best %.0f%% of %.2fTB/s (%s), prefill best %.0f%% of "
                "%.0fTF (%s)\n",
                100 * dec_best, copy_tbs, dec_at.c_str(), 100 * pre_best, fp8_tflops, pre_at.c_str());
  else
    std::printf("moe_w4a8%s: decode best %.0f%% of %.2fTB/s (%s, w4a8/cublasLt-fp8 time %s), prefill best %.0f%% of "
                "%.0fTF (%s, w4a8/cublasLt-fp8 time %s)\n",
                settled ? " --settled" : "", 100 * dec_best, copy_tbs, dec_at.c_str(), ratio_str(dec_ratio).c_str(),
                100 * pre_best, fp8_tflops, pre_at.c_str(),
                ratio_str(pre_ratio).c_str());
  return 0;
}
