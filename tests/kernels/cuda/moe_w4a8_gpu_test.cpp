// W4A8 MoE kernels on the GPU against the CPU reference (kernels/cpu/moe_w4a8.h), fresh random inputs each run
// (seed printed; MOESERVE_TEST_SEED=... repeats one), every output element checked, outputs poisoned with NaN.
//
// GEMM tolerance, derived per element, from where the two sides round (not loosened to pass):
//  - GPU: Hopper's FP8 wgmma adds the 32 products of a k32 step and the incoming accumulator in one fused
//    node: every term is aligned to the largest exponent and truncated to 13 fractional bits, and the result
//    is truncated to 14 significant bits (MMA-Sim, arXiv:2511.10909; DeepSeek-V3 report 3.3.2 on Hopper's
//    ~14-bit FP8 accumulation). So a step adds at most 33 * 2^-13 * max(|acc|, max|product|) + 2^-13 * |result|
//    (9 instead of 33 on the wide path, whose steps hold 8 nonzero products). Which channels a k-step adds follows
//    the activation channel order (kernels/cpu/moe_w4a8_pack.h), as in gemm_bounds.
//    Each 128-k group is then promoted into fp32 with one FMA (2^-24 * |running sum|). The products themselves
//    are exact: the kernel's e4m3 weights are the MXFP4 values times powers of two, represented exactly.
//  - CPU reference: sequential fp32 sum over k of exact products: at most 2^-24 * sum_k |partial sum|.
//  - bf16 output: plus the bf16 rounding, 2^-8 relative.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/cpu/moe_w4a8.h"
#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/moe_w4a8.h"
#include "kernels/cuda/ops.h"
#include "gpu_skip.h"

namespace moeserve {
namespace {

namespace ref = kernels::cpu;

unsigned test_seed(const char* what) {
  unsigned seed;
  if (const char* env = std::getenv("MOESERVE_TEST_SEED"))
    seed = unsigned(std::strtoul(env, nullptr, 10));
  else
    seed = std::random_device{}();
  std::printf("[seed] %s: %u (MOESERVE_TEST_SEED=%u repeats it)\n", what, seed, seed);
  return seed;
}

// MOESERVE_TEST_W4A8_CONFIGS="NAME,NAME": check_gemm runs only those configs and no split runs (for
// compute-sanitizer: its racecheck takes minutes per config at these shapes); unset, every config. A limited run
// says so, and fails if the names match no config that fits.
const std::string& limited_configs() {
  static const std::string only = [] {
    const char* e = std::getenv("MOESERVE_TEST_W4A8_CONFIGS");
    return std::string(e ? e : "");
  }();
  return only;
}
bool config_selected(int cfg) {
  if (limited_configs().empty()) return true;
  return ("," + limited_configs() + ",").find("," + std::string(cuda::moe_w4a8_config(cfg).name) + ",") !=
         std::string::npos;
}

template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { MOESERVE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T))); }
  DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<T>& h) {
    MOESERVE_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    MOESERVE_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { MOESERVE_CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(T))); }
};

// ---------------------------------------------------------------------------------------------------------
// Random experts and activations
// ---------------------------------------------------------------------------------------------------------
struct Experts {
  int E, N, K;
  std::vector<uint8_t> w, sw;       // checkpoint layout
  std::vector<uint8_t> packed;      // moe_w4a8 layout
  std::vector<uint64_t> flags;
  int64_t wide_groups = 0;
  bool wide(int e, int n, int g) const {
    const int fw = ref::moe_w4a8_flag_words(K);
    return (flags[(size_t(e) * (N / 64) + n / 64) * fw + g / 64] >> (g % 64)) & 1;
  }
};

// Per-32 exponents scattered +-2 around a per-row base (fast path); about 1/64 of the blocks all zero with a
// meaningless tiny scale; with wide_fraction, that share of (row, group)s gets a block 12..21 exponents below.
Experts make_experts(std::mt19937& rng, int E, int N, int K, double wide_fraction) {
  Experts x{E, N, K, {}, {}, {}, {}, 0};
  x.w.resize(size_t(E) * N * K / 2);
  x.sw.resize(size_t(E) * N * K / 32);
  for (auto& b : x.w) b = uint8_t(rng());
  std::uniform_real_distribution<double> u01(0, 1);
  for (int64_t row = 0; row < int64_t(E) * N; ++row) {
    const int base = 116 + int(rng() % 8);
    uint8_t* s = x.sw.data() + row * (K / 32);
    uint8_t* wr = x.w.data() + row * (K / 2);
    for (int b = 0; b < K / 32; ++b) {
      s[b] = uint8_t(base + int(rng() % 5) - 2);
      if (rng() % 64 == 0) {
        for (int k = 0; k < 16; ++k) wr[b * 16 + k] &= 0x88;  // magnitudes zero, signs random
        s[b] = uint8_t(rng() % 60);
      }
    }
    if (wide_fraction > 0)
      for (int g = 0; g < K / 128; ++g)
        if (u01(rng) < wide_fraction) {
          uint8_t& e = s[4 * g + rng() % 4];
          e = uint8_t(std::max(1, int(e) - 12 - int(rng() % 10)));
        }
  }
  const size_t pb = ref::moe_w4a8_packed_expert_bytes(N, K), fw = ref::moe_w4a8_flag_expert_words(N, K);
  x.packed.resize(pb * E);
  x.flags.resize(fw * E);
  for (int e = 0; e < E; ++e)
    x.wide_groups += ref::moe_w4a8_pack_expert(x.w.data() + size_t(e) * N * K / 2, x.sw.data() + size_t(e) * N * K / 32, N,
                                               K, x.packed.data() + pb * e, x.flags.data() + fw * e);
  return x;
}

// FP8 rows as act_quant makes them: each row with its own magnitude and a few outlier channels, stored in the W4A8
// activation channel order (as the glue kernels store them).
void quantize_rows(std::mt19937& rng, int rows, int K, std::vector<uint8_t>& a, std::vector<float>& sa, int sa_ld,
                   const std::vector<char>& live) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(K), s(K / 128);
  std::vector<uint8_t> q(K);
  for (int r = 0; r < rows; ++r) {
    if (!live[r]) {  // rows no expert owns: NaN bytes and NaN scales, which must not leak into any output
      std::fill(a.begin() + size_t(r) * K, a.begin() + size_t(r + 1) * K, uint8_t(0x7f));
      for (int g = 0; g < K / 128; ++g) sa[size_t(g) * sa_ld + r] = NAN;
      continue;
    }
    const float mag = std::ldexp(1.0f, int(rng() % 12) - 6);
    for (int k = 0; k < K; ++k) x[k] = nd(rng) * mag * (rng() % 97 == 0 ? 30.0f : 1.0f);
    ref::act_quant_fp8(x.data(), K, q.data(), s.data(), 1);
    ref::moe_w4a8_order_activations(q.data(), K);
    std::copy(q.begin(), q.end(), a.begin() + size_t(r) * K);
    for (int g = 0; g < K / 128; ++g) sa[size_t(g) * sa_ld + r] = s[g];
  }
}

// Activation k of `row` as the kernel reads it: its e4m3 byte (stored in the activation channel order) times the
// group's token scale.
float act_value(const std::vector<uint8_t>& a, const std::vector<float>& sa, int sa_ld, int K, int64_t row, int k) {
  return fp8_e4m3_to_f32(a[size_t(row) * K + ref::moe_w4a8_act_pos(k)]) * sa[size_t(k / 128) * sa_ld + row];
}
// Weight (n, k) of expert e: its e2m1 nibble times its 32-block's e8m0 scale.
float weight_value(const Experts& x, int e, int64_t n, int k) {
  const int K = x.K;
  const uint8_t nib = (x.w[(size_t(e) * x.N + n) * (K / 2) + k / 2] >> ((k & 1) * 4)) & 0xf;
  return fp4_e2m1_to_f32(nib) * e8m0_to_f32(x.sw[(size_t(e) * x.N + n) * (K / 32) + k / 32]);
}

// Exact value (double) and the tolerance of GPU-vs-reference for one output element; see the file comment.
struct Bound {
  double exact, tol;
};

std::vector<Bound> gemm_bounds(const Experts& x, const std::vector<uint8_t>& a, const std::vector<float>& sa, int sa_ld,
                               const std::vector<int>& counts, int cap, int rows, bool bf16_out) {
  const int N = x.N, K = x.K;
  std::vector<Bound> out(size_t(rows) * N, Bound{0, 0});
  int64_t run = 0;
  std::vector<float> as, ws;
  for (int e = 0; e < x.E; ++e) {
    const int m_count = cap > 0 ? std::min(counts[e], cap) : counts[e];
    const int64_t start = cap > 0 ? int64_t(e) * cap : run;
    run += counts[e];
    if (m_count == 0) continue;
    as.assign(size_t(m_count) * K, 0);
    for (int m = 0; m < m_count; ++m)
      for (int k = 0; k < K; ++k) as[size_t(m) * K + k] = act_value(a, sa, sa_ld, K, start + m, k);
    ws.assign(size_t(N) * K, 0);
    parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int k = 0; k < K; ++k) ws[size_t(n) * K + k] = weight_value(x, e, n, k);
    });
    const double t13 = std::ldexp(1.0, -13), u24 = std::ldexp(1.0, -24), u8 = std::ldexp(1.0, -8);
    parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const float* wr = ws.data() + size_t(n) * K;
        for (int m = 0; m < m_count; ++m) {
          const float* ar = as.data() + size_t(m) * K;
          double main = 0, gpu_err = 0, ref_abs = 0, ref_run = 0;
          // A wgmma k-step ks of group g adds the group's channels 32t + 8ks + i (t = 0..3, i = 0..7: the activation
          // channel order). Fast groups chain the four steps in the tensor core, then one promotion; wide groups
          // chain them once per 32-block j, over that block's eight channels of each step (the others are zeros),
          // and promote each block. The products are exact, so only the chains' alignments and truncations and the
          // promotions' roundings count.
          auto chain = [&](int g, int j_only, double& c, double& err) {  // j_only < 0: every block
            c = 0;
            err = 0;
            for (int ks = 0; ks < 4; ++ks) {
              double maxp = 0, step = 0;
              for (int t = 0; t < 4; ++t) {
                if (j_only >= 0 && t != j_only) continue;
                for (int i = 0; i < 8; ++i) {
                  const int k = g * 128 + 32 * t + 8 * ks + i;
                  const double p = double(ar[k]) * double(wr[k]);  // exact
                  maxp = std::max(maxp, std::fabs(p));
                  step += p;
                }
              }
              const double M = std::max(std::fabs(c) + err, maxp);
              err += (j_only >= 0 ? 9 : 33) * t13 * M;  // the step's nonzero products and the accumulator
              c += step;
              err += t13 * (std::fabs(c) + err);
            }
          };
          for (int g = 0; g < K / 128; ++g) {
            for (int k = g * 128; k < g * 128 + 128; ++k) {  // the reference's sequential sum, k ascending
              ref_run += double(ar[k]) * double(wr[k]);
              ref_abs += std::fabs(ref_run);
            }
            double c, err_g;
            if (!x.wide(e, int(n), g)) {
              chain(g, -1, c, err_g);
              main += c;
              gpu_err += err_g + u24 * (std::fabs(main) + gpu_err + err_g);
            } else {
              for (int j = 0; j < 4; ++j) {
                chain(g, j, c, err_g);
                main += c;
                gpu_err += err_g + u24 * (std::fabs(main) + gpu_err + err_g);
              }
            }
          }
          double tol = gpu_err + 1.0001 * u24 * ref_abs + 1e-30;
          if (bf16_out) tol += u8 * (std::fabs(main) + tol);
          out[size_t(start + m) * N + n] = Bound{main, tol};
        }
      }
    });
  }
  return out;
}

// The expert owning output row `row` and the row's place in it (cap > 0: masked layout).
std::pair<int64_t, int64_t> expert_of_row(const std::vector<int>& counts, int cap, int64_t row) {
  if (cap > 0) return {row / cap, row % cap};
  int64_t e = 0, m = row;
  while (e < int64_t(counts.size()) && m >= counts[e]) m -= counts[e++];
  return {e, m};
}

// Where wrong outputs lie, for telling a pipeline fault (a whole work item: BN tokens x 64 WG rows) from a
// thread's (its rows r0 and r0 + 8 of two tokens): each (row, 64-column block) with bad columns, its expert and
// place in the expert, and the bad columns as a mask (bit c: column 64 b + c).
void print_bad_blocks(const char* name, const std::string& label, const std::vector<int>& counts, int cap,
                      const std::map<std::pair<int64_t, int>, uint64_t>& bad_blocks) {
  std::printf("[%s] %s: bad elements in %zu (row, 64-column block) pairs\n", name, label.c_str(), bad_blocks.size());
  int shown = 0;
  for (const auto& [at, mask] : bad_blocks) {
    if (shown++ == 16) break;
    const auto [e, m] = expert_of_row(counts, cap, at.first);
    std::printf("[%s]   row %lld (expert %lld, its row %lld) block %d: columns %016llx\n", name,
                (long long)at.first, (long long)e, (long long)m, at.second, (unsigned long long)mask);
  }
}

// Which K group a bad block's errors follow, warp by warp (the 16 columns a consumer warp computes): the group g and
// factor f that best fit err = f * (group g's share of the exact value), and how much of the error is left. A group
// whose token scales a warp read from the stage's next chunk fits with f = 2^j - 1 and nothing left (the fifty-ninth
// session's initcheck failures, moe-w4a8.md); a fault of another kind fits no single group.
void explain_bad_block(const char* name, const Experts& x, const std::vector<uint8_t>& a, const std::vector<float>& sa,
                       int sa_ld, int64_t row, int e, int block, uint64_t mask, const std::vector<double>& err) {
  const int K = x.K, NG = K / 128;
  for (int w = 0; w < 4; ++w) {
    if (((mask >> (16 * w)) & 0xffff) == 0) continue;
    std::vector<double> share(size_t(NG) * 16, 0.0);  // [g][c]
    for (int c = 0; c < 16; ++c) {
      const size_t n = size_t(block) * 64 + 16 * w + c;
      for (int k = 0; k < K; ++k)
        share[size_t(k / 128) * 16 + c] += double(act_value(a, sa, sa_ld, K, row, k)) * weight_value(x, e, n, k);
    }
    double err2 = 0;
    for (int c = 0; c < 16; ++c) err2 += err[16 * w + c] * err[16 * w + c];
    int best = -1;
    double best_f = 0, best_left = 2;
    for (int g = 0; g < NG; ++g) {
      double num = 0, den = 0;
      for (int c = 0; c < 16; ++c) {
        num += err[16 * w + c] * share[size_t(g) * 16 + c];
        den += share[size_t(g) * 16 + c] * share[size_t(g) * 16 + c];
      }
      if (den == 0) continue;
      const double f = num / den;
      double left = 0;
      for (int c = 0; c < 16; ++c) left += std::pow(err[16 * w + c] - f * share[size_t(g) * 16 + c], 2);
      left = err2 > 0 ? std::sqrt(left / err2) : 0;
      if (left < best_left) {
        best = g;
        best_f = f;
        best_left = left;
      }
    }
    std::printf("[%s]     row %lld block %d warp %d: err = %.4f x group %d's share, %.4f of the error left\n", name,
                (long long)row, block, w, best_f, best, best_left);
  }
}

// ---------------------------------------------------------------------------------------------------------
// GEMM: every config x both layouts against the reference
// ---------------------------------------------------------------------------------------------------------
void check_gemm(const char* name, int E, int N, int K, std::vector<int> counts, double wide_fraction) {
  std::mt19937 rng(test_seed(name));
  const Experts x = make_experts(rng, E, N, K, wide_fraction);
  std::printf("[%s] E=%d N=%d K=%d rows/expert:", name, E, N, K);
  for (int c : counts) std::printf(" %d", c);
  std::printf("; wide (64-row block, group) pairs: %lld\n", (long long)x.wide_groups);
  if (!limited_configs().empty())
    std::printf("[%s] limited to %s by MOESERVE_TEST_W4A8_CONFIGS (no split runs)\n", name, limited_configs().c_str());
  if (wide_fraction > 0) EXPECT_GT(x.wide_groups, 0);
  const int max_count = *std::max_element(counts.begin(), counts.end());
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  const int cap = max_count + 5;

  DevBuf<uint8_t> dw(x.packed);
  DevBuf<uint64_t> dflags(x.flags);
  DevBuf<int> dcounts(counts);
  cuda::MoeW4A8Weights wts{dw.p, dflags.p, E, N, K};

  for (int layout = 0; layout < 2; ++layout) {
    const bool masked = layout == 1;
    const int rows = masked ? E * cap : total;
    const int sa_ld = (rows + 3) / 4 * 4 + 4;
    std::vector<char> live(rows, masked ? 0 : 1);
    if (masked)
      for (int e = 0; e < E; ++e)
        for (int m = 0; m < counts[e]; ++m) live[size_t(e) * cap + m] = 1;
    std::vector<uint8_t> a(size_t(rows) * K);
    std::vector<float> sa(size_t(K / 128) * sa_ld, NAN);
    quantize_rows(rng, rows, K, a, sa, sa_ld, live);

    std::vector<float> yref(size_t(rows) * N, NAN);
    ref::moe_grouped_gemm_w4a8(a.data(), sa.data(), sa_ld, x.w.data(), x.sw.data(), counts.data(), E, N, K,
                               masked ? cap : 0, yref.data());
    const std::vector<Bound> b32 = gemm_bounds(x, a, sa, sa_ld, counts, masked ? cap : 0, rows, false);
    const std::vector<Bound> b16 = gemm_bounds(x, a, sa, sa_ld, counts, masked ? cap : 0, rows, true);

    DevBuf<uint8_t> da(a);
    DevBuf<float> dsa(sa);
    cuda::MoeW4A8Input in{da.p, dsa.p, rows, sa_ld};
    DevBuf<float> y(size_t(rows) * N);
    DevBuf<int> dcounter(std::vector<int>{0});
    // One run: config cfg (and a split of the loaded experts onto another config), every element checked; with
    // `dynamic` the CTAs take their work items from a counter (MoeW4A8Chain::item_counter), which must be 0 again after.
    auto run_and_check = [&](int cfg, const cuda::MoeW4A8Split& split, bool f32, bool dynamic) {
      const auto out = f32 ? cuda::MoeOutType::F32 : cuda::MoeOutType::BF16;
      std::string label = cuda::moe_w4a8_config(cfg).name;
      if (split.config >= 0)
        label += std::string("+") + cuda::moe_w4a8_config(split.config).name + ">" + std::to_string(split.rows);
      if (dynamic) label += " dynamic";
      cuda::MoeW4A8Chain chain;
      if (dynamic) chain.item_counter = dcounter.p;
      y.poison();
      cudaError_t err =
          masked ? cuda::moe_grouped_gemm_w4a8_masked(wts, in, dcounts.p, cap, y.p, out, 1, cfg, nullptr, chain, split)
                 : cuda::moe_grouped_gemm_w4a8_contiguous(wts, in, dcounts.p, y.p, out, 1, cfg, nullptr, chain, split);
      ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (dynamic) EXPECT_EQ(dcounter.download()[0], 0) << name << " config " << label << ": item counter not reset";
      const std::vector<float> yg = y.download();
      const uint16_t* yg16 = reinterpret_cast<const uint16_t*>(yg.data());
      const std::vector<Bound>& bd = f32 ? b32 : b16;
      int64_t bad = 0, checked = 0, leaked = 0;
      double worst_ratio = 0;
      std::map<std::pair<int64_t, int>, uint64_t> bad_blocks;  // (row, 64-column block) -> its bad columns
      for (int64_t r = 0; r < rows; ++r)
        for (int n = 0; n < N; ++n) {
          const size_t i = size_t(r) * N + n;
          const uint32_t raw32 = f32_to_bits(yg[i]);
          const uint16_t raw16 = yg16[i];
          if (!live[r]) {  // never written
            if (f32 ? raw32 != 0xffffffffu : raw16 != 0xffff) ++leaked;
            continue;
          }
          const double got = f32 ? double(yg[i]) : double(bf16_to_f32(raw16));
          const double want = yref[i];
          const double diff = std::fabs(got - want);
          ++checked;
          const double ratio = diff / bd[i].tol;
          if (!(ratio <= 1.0)) {
            bad_blocks[{r, n / 64}] |= uint64_t(1) << (n % 64);
            if (bad++ < 5)
              ADD_FAILURE() << name << " config " << label << (masked ? " masked" : " contiguous")
                            << (f32 ? " f32" : " bf16") << " row " << r << " n " << n << ": got " << got << " ref "
                            << want << " exact " << bd[i].exact << " tol " << bd[i].tol;
          } else {
            worst_ratio = std::max(worst_ratio, ratio);
          }
        }
      EXPECT_EQ(bad, 0);
      if (bad > 0) {
        print_bad_blocks(name, label, counts, masked ? cap : 0, bad_blocks);
        int explained = 0;
        for (const auto& [at, mask] : bad_blocks) {
          if (explained++ == 4) break;
          const int e = int(expert_of_row(counts, masked ? cap : 0, at.first).first);
          std::vector<double> err(64);
          for (int c = 0; c < 64; ++c) {
            const size_t i = size_t(at.first) * N + size_t(at.second) * 64 + c;
            err[c] = (f32 ? double(yg[i]) : double(bf16_to_f32(yg16[i]))) - bd[i].exact;
          }
          explain_bad_block(name, x, a, sa, sa_ld, at.first, e, at.second, mask, err);
        }
      }
      EXPECT_EQ(leaked, 0) << "rows of no expert were written";
      std::printf("[%s] %-24s %-10s %s: %lld elements checked, %lld bad, max |err|/tol %.3f\n", name, label.c_str(),
                  masked ? "masked" : "contiguous", f32 ? "f32 " : "bf16", (long long)checked, (long long)bad,
                  worst_ratio);
    };
    int config_runs = 0;
    for (int cfg = 0; cfg < cuda::moe_w4a8_config_count(); ++cfg) {
      if (!cuda::moe_w4a8_config_fits(cfg, N, K)) continue;  // the probe test checks the refusal
      if (!config_selected(cfg)) continue;
      // Every config runs with fixed-order items in one layout and counter-fed ones in the other.
      run_and_check(cfg, {}, (cfg + layout) % 2 == 1, (cfg / 2 + layout) % 2 == 0);
      ++config_runs;
    }
    EXPECT_GT(config_runs, 0) << "no config runs (MOESERVE_TEST_W4A8_CONFIGS=" << limited_configs() << ")";
    if (!limited_configs().empty()) continue;
    // Splits by expert load: thresholds below, between and above the cases' row counts (every expert on one side,
    // or some on each).
    auto by_name = [](const char* n) { return cuda::moe_w4a8_config_by_name(n); };
    const std::pair<const char*, const char*> pairs[] = {{"bn8_wg1_g2_s5", "bn64_wg2_g1_s8"},
                                                         {"bn8_wg2_g2_s4", "bn128_wg2_g1_s5_pf"},
                                                         {"bn16_wg1_g2_s4", "bn32_wg2_g2_s7"}};
    int split_runs = 0;
    for (const auto& [small, big] : pairs)
      for (int rows_at : {0, 8, 16, max_count}) {
        const cuda::MoeW4A8Split split{by_name(big), rows_at};
        if (!cuda::moe_w4a8_config_fits(by_name(small), N, K) || !cuda::moe_w4a8_config_fits(split.config, N, K)) continue;
        run_and_check(by_name(small), split, (rows_at + layout) % 2 == 1, split_runs % 2 == 1);
        ++split_runs;
      }
    EXPECT_GT(split_runs, 0);
    for (const cuda::MoeW4A8Split bad : {cuda::MoeW4A8Split{cuda::moe_w4a8_config_count(), 8},
                                         cuda::MoeW4A8Split{by_name("bn64_wg2_g1_s8"), -1}})
      EXPECT_EQ(cuda::moe_grouped_gemm_w4a8_contiguous(wts, in, dcounts.p, y.p, cuda::MoeOutType::F32, 1,
                                                       by_name("bn8_wg1_g2_s5"), nullptr, {}, bad),
                cudaErrorInvalidValue);
  }
}

// Layout probe: one nonzero weight at (n0, k0); token m sees only channels k in [32m, 32m + 32) (stored in the
// activation channel order). The output must be nonzero at exactly (m = k0 / 32, n = n0); where it lands otherwise
// tells which mapping is off.
TEST(MoeW4A8Gpu, GemmLayoutProbe) {
  SKIP_WITHOUT_GPU();
  const int E = 1, N = 128, K = 256, M = 8;
  const int probes[][2] = {{0, 0}, {9, 37}, {17, 100}, {63, 255}, {64, 130}, {127, 201}, {40, 20}, {88, 236}};
  std::vector<uint8_t> a(size_t(M) * K, 0);
  for (int m = 0; m < M; ++m) {
    for (int k = 32 * m; k < 32 * m + 32; ++k) a[size_t(m) * K + k] = f32_to_fp8_e4m3(1.0f);
    ref::moe_w4a8_order_activations(a.data() + size_t(m) * K, K);
  }
  const int sa_ld = M;
  std::vector<float> sa(size_t(K / 128) * sa_ld, 1.0f);
  DevBuf<uint8_t> da(a);
  DevBuf<float> dsa(sa);
  DevBuf<int> dcounts(std::vector<int>{M});
  DevBuf<float> y(size_t(M) * N);
  for (const auto& pr : probes) {
    const int n0 = pr[0], k0 = pr[1];
    std::vector<uint8_t> w(size_t(N) * K / 2, 0), sw(size_t(N) * K / 32, 127);
    w[size_t(n0) * K / 2 + k0 / 2] = uint8_t(0x4 << ((k0 & 1) * 4));  // 2.0
    std::vector<uint8_t> packed(ref::moe_w4a8_packed_expert_bytes(N, K));
    std::vector<uint64_t> flags(ref::moe_w4a8_flag_expert_words(N, K));
    ref::moe_w4a8_pack_expert(w.data(), sw.data(), N, K, packed.data(), flags.data());
    DevBuf<uint8_t> dw(packed);
    DevBuf<uint64_t> df(flags);
    for (int cfg = 0; cfg < cuda::moe_w4a8_config_count(); ++cfg) {
      y.poison();
      ASSERT_TRUE(cuda::moe_w4a8_config_fits(cfg, N, K)) << cuda::moe_w4a8_config(cfg).name;
      ASSERT_EQ(cuda::moe_grouped_gemm_w4a8_contiguous({dw.p, df.p, E, N, K}, {da.p, dsa.p, M, sa_ld}, dcounts.p, y.p,
                                                       cuda::MoeOutType::F32, M, cfg, nullptr),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> g = y.download();
      std::string where;
      int nonzero = 0;
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          const float v = g[size_t(m) * N + n];
          if (v != 0.0f) {
            ++nonzero;
            if (where.size() < 200) where += " (m" + std::to_string(m) + ",n" + std::to_string(n) + ")=" + std::to_string(v);
          }
        }
      const bool ok = nonzero == 1 && g[size_t(k0 / 32) * N + n0] == 2.0f;
      EXPECT_TRUE(ok) << "probe (n" << n0 << ", k" << k0 << ") config " << cuda::moe_w4a8_config(cfg).name
                      << ": want (m" << k0 / 32 << ",n" << n0 << ")=2, got" << where;
    }
  }
}

// Shapes no config runs are refused before any launch (no GPU needed): rows not a multiple of 128, K not a
// multiple of 256, an unknown config.
TEST(MoeW4A8Gpu, ConfigFitsRefusesShapesItCannotRun) {
  for (int cfg = 0; cfg < cuda::moe_w4a8_config_count(); ++cfg) {
    const char* name = cuda::moe_w4a8_config(cfg).name;
    EXPECT_TRUE(cuda::moe_w4a8_config_fits(cfg, 4096, 4096)) << name;
    EXPECT_TRUE(cuda::moe_w4a8_config_fits(cfg, 6144, 7168)) << name;
    EXPECT_FALSE(cuda::moe_w4a8_config_fits(cfg, 4096 + 64, 4096)) << name;
    EXPECT_FALSE(cuda::moe_w4a8_config_fits(cfg, 4096, 4096 + 128)) << name;
    EXPECT_FALSE(cuda::moe_w4a8_config_fits(cfg, 0, 4096)) << name;
  }
  EXPECT_FALSE(cuda::moe_w4a8_config_fits(-1, 4096, 4096));
  EXPECT_FALSE(cuda::moe_w4a8_config_fits(cuda::moe_w4a8_config_count(), 4096, 4096));
  // The GEMM checks the same before touching memory: these pointers are never read.
  uint8_t byte = 0;
  uint64_t word = 0;
  int count = 0;
  float f = 0;
  alignas(16) uint8_t a[16] = {};
  alignas(16) float sa[4] = {};
  EXPECT_EQ(cuda::moe_grouped_gemm_w4a8_contiguous({&byte, &word, 1, 4096 + 64, 4096}, {a, sa, 1, 4}, &count, &f,
                                                   cuda::MoeOutType::F32, 1, 0, nullptr),
            cudaErrorInvalidValue);
}

// The dispatch table, read without a GPU: on every GPU it was tuned on (the H200 among them) every V4 shape and
// step size gets a config that runs the shape, with decode-sized token tiles up to 256 tokens and the prefill tiles
// from 4K; a GPU without entries falls back to the heuristic by rows per active expert (slots / E).
TEST(MoeW4A8Gpu, DispatchTableByRoutedSlots) {
  const int shapes[][3] = {{384, 6144, 7168}, {384, 7168, 3072}, {256, 4096, 4096}, {256, 4096, 2048}};
  const std::vector<std::string> gpus = cuda::moe_w4a8_table_gpus();
  EXPECT_NE(std::find(gpus.begin(), gpus.end(), "NVIDIA H200"), gpus.end());
  for (const std::string& gpu : gpus) {
    SCOPED_TRACE(gpu);
    for (const auto& sh : shapes) {
      EXPECT_TRUE(cuda::moe_w4a8_table_has(gpu.c_str(), sh[0], sh[1], sh[2]));
      EXPECT_FALSE(cuda::moe_w4a8_table_has("other GPU", sh[0], sh[1], sh[2]));
      for (int T = 1; T <= 32768; T = T < 64 ? T + 1 : T * 2) {
        const int id = cuda::moe_w4a8_pick_config_for(gpu.c_str(), sh[0], sh[1], sh[2], 6 * T);
        ASSERT_GE(id, 0);
        const cuda::MoeW4A8Config& c = cuda::moe_w4a8_config(id);
        EXPECT_TRUE(cuda::moe_w4a8_config_fits(id, sh[1], sh[2])) << c.name << " T " << T;
        if (T <= 256) EXPECT_LE(c.block_tokens, 32) << c.name << " T " << T << " N " << sh[1];
        if (T >= 4096) EXPECT_GE(c.block_tokens, 96) << c.name << " T " << T << " N " << sh[1];  // the prefill tiles
        // A split (decode with skewed routing) puts the loaded experts on a wider tile than the main config's.
        const cuda::MoeW4A8Split split = cuda::moe_w4a8_pick_split_for(gpu.c_str(), sh[0], sh[1], sh[2], 6 * T);
        if (split.config >= 0) {
          EXPECT_TRUE(cuda::moe_w4a8_config_fits(split.config, sh[1], sh[2])) << " T " << T;
          EXPECT_GT(cuda::moe_w4a8_config(split.config).block_tokens, c.block_tokens) << " T " << T;
          EXPECT_GE(split.rows, c.block_tokens) << " T " << T;
          EXPECT_LT(T, 4096) << "a split at prefill sizes";
        }
      }
    }
  }
  auto name = [](int id) { return std::string(cuda::moe_w4a8_config(id).name); };
  EXPECT_EQ(name(cuda::moe_w4a8_pick_config_for("other GPU", 256, 4096, 4096, 6)), "bn8_wg1_g2_s5");
  EXPECT_EQ(name(cuda::moe_w4a8_pick_config_for("other GPU", 256, 4096, 4096, 6 * 600)), "bn16_wg1_g2_s4");
  EXPECT_EQ(name(cuda::moe_w4a8_pick_config_for("other GPU", 256, 4096, 4096, 6 * 4096)), "bn128_wg2_g1_s5_pf");
}

TEST(MoeW4A8Gpu, GemmProW13) {
  SKIP_WITHOUT_GPU();
  check_gemm("pro_w13", 6, 6144, 7168, {0, 1, 5, 33, 0, 17}, 0);
}
TEST(MoeW4A8Gpu, GemmProW2) {
  SKIP_WITHOUT_GPU();
  check_gemm("pro_w2", 6, 7168, 3072, {3, 0, 40, 1, 9, 0}, 0);
}
TEST(MoeW4A8Gpu, GemmFlashW13) {
  SKIP_WITHOUT_GPU();
  check_gemm("flash_w13", 6, 4096, 4096, {2, 70, 0, 1, 0, 16}, 0);
}
// With the counts of the tests above, every width of a tile's last sub-tile that each prefill config can issue
// (32-token steps; 100 rows: two sub-tiles of bn192x96, the second 32 wide).
TEST(MoeW4A8Gpu, GemmFlashW2ManyTokenTiles) {
  SKIP_WITHOUT_GPU();
  check_gemm("flash_w2", 6, 4096, 2048, {130, 0, 7, 1, 257, 100}, 0);
}
TEST(MoeW4A8Gpu, GemmLargeExponentSpread) {
  SKIP_WITHOUT_GPU();
  check_gemm("wide_spread", 4, 4096, 2048, {5, 0, 33, 129}, 0.05);
}

// MoeW4A8Chain::every_thread_releases (the stage release compute-sanitizer's racecheck follows: every consumer thread
// arrives on the empty barrier) changes only who arrives: the same bits as the default, every config, both item
// orders. The default's outputs are checked against the reference by the tests above. (Under
// MOESERVE_W4A8_EVERY_THREAD_RELEASES=1 both sides take that form.)
TEST(MoeW4A8Gpu, EveryThreadReleasingChangesNoBit) {
  SKIP_WITHOUT_GPU();
  const int E = 6, N = 4096, K = 2048;
  const std::vector<int> counts = {130, 0, 7, 1, 257, 100};  // stages reused (16 groups), many token tiles
  std::mt19937 rng(test_seed("every_thread_releases"));
  const Experts x = make_experts(rng, E, N, K, 0);
  const int rows = std::accumulate(counts.begin(), counts.end(), 0);
  const int sa_ld = (rows + 3) / 4 * 4 + 4;
  std::vector<uint8_t> a(size_t(rows) * K);
  std::vector<float> sa(size_t(K / 128) * sa_ld, NAN);
  quantize_rows(rng, rows, K, a, sa, sa_ld, std::vector<char>(rows, 1));
  DevBuf<uint8_t> dw(x.packed), da(a);
  DevBuf<uint64_t> dflags(x.flags);
  DevBuf<int> dcounts(counts), dcounter(std::vector<int>{0});
  DevBuf<float> dsa(sa), y(size_t(rows) * N);
  const cuda::MoeW4A8Weights wts{dw.p, dflags.p, E, N, K};
  const cuda::MoeW4A8Input in{da.p, dsa.p, rows, sa_ld};
  auto run = [&](int cfg, bool dynamic, bool every_thread) {
    cuda::MoeW4A8Chain chain;
    if (dynamic) chain.item_counter = dcounter.p;
    chain.every_thread_releases = every_thread;
    y.poison();
    const cudaError_t err =
        cuda::moe_grouped_gemm_w4a8_contiguous(wts, in, dcounts.p, y.p, cuda::MoeOutType::F32, 1, cfg, nullptr, chain, {});
    EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return y.download();
  };
  int runs = 0;
  for (int cfg = 0; cfg < cuda::moe_w4a8_config_count(); ++cfg) {
    if (!cuda::moe_w4a8_config_fits(cfg, N, K) || !config_selected(cfg)) continue;
    for (const bool dynamic : {false, true}) {
      const std::vector<float> base = run(cfg, dynamic, false);
      const std::vector<float> every = run(cfg, dynamic, true);
      int64_t differ = 0;
      for (size_t i = 0; i < base.size(); ++i) differ += f32_to_bits(base[i]) != f32_to_bits(every[i]);
      EXPECT_EQ(differ, 0) << cuda::moe_w4a8_config(cfg).name << (dynamic ? " dynamic" : "") << ": elements differ";
      ++runs;
    }
  }
  EXPECT_GT(runs, 0);
}

// ---------------------------------------------------------------------------------------------------------
// Glue
// ---------------------------------------------------------------------------------------------------------
std::vector<int> random_topk(std::mt19937& rng, int T, int topk, int E, bool zipf) {
  std::vector<double> weight(E);
  for (int e = 0; e < E; ++e) weight[e] = zipf ? 1.0 / std::pow(double(e + 1), 1.1) : 1.0;
  std::shuffle(weight.begin(), weight.end(), rng);
  std::discrete_distribution<int> pick(weight.begin(), weight.end());
  std::vector<int> ids(size_t(T) * topk);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < topk; ++j) {
      int e;
      do e = pick(rng);
      while (std::find(ids.begin() + size_t(t) * topk, ids.begin() + size_t(t) * topk + j, e) != ids.begin() + size_t(t) * topk + j);
      ids[size_t(t) * topk + j] = e;
    }
  return ids;
}

TEST(MoeW4A8Gpu, RouteRowsMatchesReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("route_rows"));
  // T * topk <= 1024 takes the one-block path (decode), larger the multi-block one.
  struct Case {
    int T, E, cap;
  };
  std::vector<Case> cases;
  for (int T : {1, 97, 170, 171, 3000})
    for (int E : {256, 384})
      for (int cap : {0, 24}) cases.push_back({T, E, cap});
  for (const auto& [T, E, cap] : cases) {
    const int topk = 6;
    const std::vector<int> ids = random_topk(rng, T, topk, E, true);
    const int rows = cap > 0 ? E * cap : T * topk;
    std::vector<int> counts(E), ros(T * topk), sor(rows);
    ref::moe_route_rows(ids.data(), T, topk, E, cap, counts.data(), ros.data(), sor.data());
    DevBuf<int> dids(ids), dcounts(E), dros(size_t(T) * topk), dsor(rows);
    DevBuf<uint8_t> ws(cuda::moe_route_rows_workspace(T, topk, E));
    dcounts.poison();
    dros.poison();
    ASSERT_EQ(cuda::moe_route_rows(dids.p, T, topk, E, cap, dcounts.p, dros.p, dsor.p, ws.p, ws.n, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(dcounts.download(), counts) << "T " << T << " E " << E << " cap " << cap;
    EXPECT_EQ(dros.download(), ros) << "T " << T << " E " << E << " cap " << cap;
    EXPECT_EQ(dsor.download(), sor) << "T " << T << " E " << E << " cap " << cap;
  }
}

std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(nd(rng) * (rng() % 50 == 0 ? 8.0f : 1.0f));
  return v;
}

// Both input types: bf16 (the official model dtype) and fp32 (the engine's activations, moe_*_f32).
TEST(MoeW4A8Gpu, GatherQuantBitExact) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("gather_quant"));
  for (bool f32 : {false, true})
    for (int D : {4096, 7168}) {
      const int T = 97, topk = 6, E = 64, cap = 40;
      const std::vector<int> ids = random_topk(rng, T, topk, E, false);
      const int rows = E * cap, sa_ld = rows + 4;
      std::vector<int> counts(E), ros(T * topk), sor(rows);
      ref::moe_route_rows(ids.data(), T, topk, E, cap, counts.data(), ros.data(), sor.data());
      std::vector<uint16_t> x = random_bf16(rng, size_t(T) * D, 3.0f);
      std::vector<float> xf(x.size());
      std::uniform_real_distribution<float> u(-3.0f, 3.0f);
      for (float& v : xf) v = u(rng) * (rng() % 17 == 0 ? 40.0f : 1.0f);  // some groups with large amax
      gputest::fill_quantizer_extremes(xf.data(), xf.data() + D, D);  // tokens 0 and 1
      for (int c = 0; c < 2 * D; ++c) x[c] = uint16_t(f32_to_bits(xf[c]) >> 16);  // the same rows as bf16
      std::vector<uint8_t> a(size_t(rows) * D, 0x5a);
      std::vector<float> sa(size_t(D / 128) * sa_ld, -1.0f);
      DevBuf<uint16_t> dx(x);
      DevBuf<float> dxf(xf);
      DevBuf<int> dsor(sor);
      DevBuf<uint8_t> da(a);
      DevBuf<float> dsa(sa);
      if (f32) {
        ref::moe_gather_quant_f32(xf.data(), D, sor.data(), rows, topk, a.data(), sa.data(), sa_ld);
        ASSERT_EQ(cuda::moe_gather_quant_f32(dxf.p, D, dsor.p, rows, topk, da.p, dsa.p, sa_ld, nullptr), cudaSuccess);
      } else {
        ref::moe_gather_quant(x.data(), D, sor.data(), rows, topk, a.data(), sa.data(), sa_ld);
        ASSERT_EQ(cuda::moe_gather_quant(dx.p, D, dsor.p, rows, topk, da.p, dsa.p, sa_ld, nullptr), cudaSuccess);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(da.download(), a) << "D " << D << (f32 ? " fp32" : " bf16");
      const std::vector<float> gsa = dsa.download();
      int64_t bad = 0;
      for (size_t i = 0; i < sa.size(); ++i) bad += f32_to_bits(gsa[i]) != f32_to_bits(sa[i]);
      EXPECT_EQ(bad, 0) << "D " << D << (f32 ? " fp32" : " bf16");
    }
}

// The decode-step fusion of moe_route_rows (contiguous) and moe_gather_quant_f32: the same counts, rows, FP8
// rows and scales as the two launches, bit for bit, up to the largest slot count it takes.
TEST(MoeW4A8Gpu, RouteGatherQuantFusedMatchesSeparate) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("route_gather_quant"));
  const int topk = 6, max_t = cuda::moe_route_gather_max_slots() / topk;
  for (int E : {256, 384})
    for (int D : {4096, 7168})
      for (int T : {1, 3, 8, max_t}) {
        const std::vector<int> ids = random_topk(rng, T, topk, E, true);
        const int S = T * topk, sa_ld = (S + 3) / 4 * 4;
        std::vector<float> xf(size_t(T) * D);
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        for (float& v : xf) v = u(rng) * (rng() % 17 == 0 ? 40.0f : 1.0f);
        DevBuf<int> dids(ids);
        DevBuf<float> dxf(xf);
        DevBuf<int> c1(E), r1(S), s1(S), c2(E), r2(S), s2(S);
        DevBuf<uint8_t> a1(size_t(S) * D), a2(size_t(S) * D);
        DevBuf<float> sa1(size_t(D / 128) * sa_ld), sa2(size_t(D / 128) * sa_ld);
        for (auto* b : {&c1, &r1, &s1, &c2, &r2, &s2}) b->poison();
        sa1.poison();
        sa2.poison();
        DevBuf<uint8_t> ws(cuda::moe_route_rows_workspace(T, topk, E));
        ASSERT_EQ(cuda::moe_route_rows(dids.p, T, topk, E, 0, c1.p, r1.p, s1.p, ws.p, ws.n, nullptr), cudaSuccess);
        ASSERT_EQ(cuda::moe_gather_quant_f32(dxf.p, D, s1.p, S, topk, a1.p, sa1.p, sa_ld, nullptr), cudaSuccess);
        ASSERT_EQ(cuda::moe_route_gather_quant_f32(dids.p, T, topk, E, dxf.p, D, c2.p, r2.p, s2.p, a2.p, sa2.p, sa_ld,
                                                   nullptr),
                  cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::string what = "E " + std::to_string(E) + " D " + std::to_string(D) + " T " + std::to_string(T);
        EXPECT_EQ(c2.download(), c1.download()) << what;
        EXPECT_EQ(r2.download(), r1.download()) << what;
        EXPECT_EQ(s2.download(), s1.download()) << what;
        EXPECT_EQ(a2.download(), a1.download()) << what;
        const std::vector<float> g1 = sa1.download(), g2 = sa2.download();
        int64_t bad = 0;
        for (size_t i = 0; i < g1.size(); ++i)
          if (i % size_t(sa_ld) < size_t(S)) bad += f32_to_bits(g1[i]) != f32_to_bits(g2[i]);
        EXPECT_EQ(bad, 0) << what;
      }
  EXPECT_EQ(cuda::moe_route_gather_quant_f32(nullptr, cuda::moe_route_gather_max_slots() / topk + 1, topk, 256, nullptr,
                                             4096, nullptr, nullptr, nullptr, nullptr, nullptr, 4, nullptr),
            cudaErrorInvalidValue);
}

// The router folded into the glue launch: chosen experts, weights, counts, rows, FP8 rows and scales equal
// moe_route followed by moe_route_gather_quant_f32, bit for bit (scored top-k with a bias, and hash routing).
TEST(MoeW4A8Gpu, RouteLogitsGatherQuantMatchesRouteThenGather) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("route_logits"));
  const int topk = 6, vocab = 1000;
  for (int E : {256, 384})
    for (int D : {4096, 7168})
      for (int T : {1, 4, cuda::moe_route_logits_max_tokens()})
        for (int func : {0, 1, 2})
          for (bool hash : {false, true}) {
            if (hash && func != 0) continue;
            const int S = T * topk, sa_ld = (S + 3) / 4 * 4;
            std::normal_distribution<float> nd(0.0f, 2.0f);
            std::vector<float> logits(size_t(T) * E), bias(E), xf(size_t(T) * D);
            for (float& v : logits) v = nd(rng);
            logits[size_t(E / 3)] = logits[size_t(E / 3) + 1];  // a tie
            for (float& v : bias) v = nd(rng) * 0.05f;
            for (float& v : xf) v = nd(rng);
            std::vector<int> tid2eid(size_t(vocab) * topk), tok(T);
            for (int v = 0; v < vocab; ++v) {
              std::vector<int> perm(E);
              std::iota(perm.begin(), perm.end(), 0);
              std::shuffle(perm.begin(), perm.end(), rng);
              std::copy(perm.begin(), perm.begin() + topk, tid2eid.begin() + size_t(v) * topk);
            }
            for (int& t : tok) t = int(rng() % vocab);
            DevBuf<float> dl(logits), db(bias), dxf(xf), w1(S), w2(S);
            DevBuf<int> dh(tid2eid), dtok(tok), ch1(S), ch2(S), c1(E), r1(S), s1(S), c2(E), r2(S), s2(S);
            DevBuf<uint8_t> a1(size_t(S) * D), a2(size_t(S) * D);
            DevBuf<float> sa1(size_t(D / 128) * sa_ld), sa2(size_t(D / 128) * sa_ld);
            for (auto* b : {&ch1, &ch2, &c1, &r1, &s1, &c2, &r2, &s2}) b->poison();
            for (auto* b : {&w1, &w2, &sa1, &sa2}) b->poison();
            cuda::RouteLogits r;
            r.logits = dl.p;
            r.T = T;
            r.E = E;
            r.K = topk;
            r.func = func;
            r.bias = hash ? nullptr : db.p;
            r.tid2eid = hash ? dh.p : nullptr;
            r.token_ids = dtok.p;
            r.norm_topk = func != 2;
            r.route_scale = 2.5f;
            ASSERT_EQ(cuda::moe_route(dl.p, T, E, topk, func, r.bias, r.tid2eid, dtok.p, r.norm_topk, r.route_scale,
                                      ch1.p, w1.p, nullptr),
                      cudaSuccess);
            ASSERT_EQ(cuda::moe_route_gather_quant_f32(ch1.p, T, topk, E, dxf.p, D, c1.p, r1.p, s1.p, a1.p, sa1.p, sa_ld,
                                                       nullptr),
                      cudaSuccess);
            r.chosen = ch2.p;
            r.weight = w2.p;
            ASSERT_EQ(cuda::moe_route_logits_gather_quant_f32(r, dxf.p, D, c2.p, r2.p, s2.p, a2.p, sa2.p, sa_ld, nullptr),
                      cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            const std::string what = "E " + std::to_string(E) + " D " + std::to_string(D) + " T " + std::to_string(T) +
                                     " func " + std::to_string(func) + (hash ? " hash" : "");
            EXPECT_EQ(ch2.download(), ch1.download()) << what;
            EXPECT_EQ(c2.download(), c1.download()) << what;
            EXPECT_EQ(r2.download(), r1.download()) << what;
            EXPECT_EQ(s2.download(), s1.download()) << what;
            EXPECT_EQ(a2.download(), a1.download()) << what;
            const std::vector<float> g1 = w1.download(), g2 = w2.download();
            int64_t bad = 0;
            for (size_t i = 0; i < g1.size(); ++i) bad += f32_to_bits(g1[i]) != f32_to_bits(g2[i]) || !std::isfinite(g1[i]);
            const std::vector<float> q1 = sa1.download(), q2 = sa2.download();
            for (size_t i = 0; i < q1.size(); ++i)
              if (i % size_t(sa_ld) < size_t(S)) bad += f32_to_bits(q1[i]) != f32_to_bits(q2[i]);
            EXPECT_EQ(bad, 0) << what;
          }
  cuda::RouteLogits too_many;
  too_many.T = cuda::moe_route_logits_max_tokens() + 1;
  too_many.E = 256;
  too_many.K = 6;
  EXPECT_EQ(cuda::moe_route_logits_gather_quant_f32(too_many, nullptr, 4096, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                    4, nullptr),
            cudaErrorInvalidValue);
}

TEST(MoeW4A8Gpu, SwigluQuantMatchesReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("swiglu_quant"));
  for (bool f32 : {false, true})
    for (int I : {2048, 3072}) {
      const int T = 150, topk = 6, rows = T * topk, sa_ld = rows;
      std::vector<int> sor(rows);
      for (int r = 0; r < rows; ++r) sor[r] = (r * 7919) % rows;  // some permutation of the slots
      sor[5] = -1;
      const std::vector<uint16_t> h = random_bf16(rng, size_t(rows) * 2 * I, 4.0f);  // ~5% beyond the clamp
      std::vector<float> hf(h.size());
      for (size_t i = 0; i < h.size(); ++i) hf[i] = bf16_to_f32(h[i]) * (1.0f + float(rng() % 1000) * 1e-6f);
      std::vector<float> wts(rows);
      for (auto& w : wts) w = float(rng() % 1000) / 400.0f;
      std::vector<uint8_t> q(size_t(rows) * I, 0x5a);
      std::vector<float> s(size_t(I / 128) * sa_ld, -1.0f);
      DevBuf<uint16_t> dh(h);
      DevBuf<float> dhf(hf);
      DevBuf<int> dsor(sor);
      DevBuf<float> dw(wts);
      DevBuf<uint8_t> dq(q);
      DevBuf<float> ds(s);
      if (f32) {
        ref::moe_swiglu_quant_f32(hf.data(), I, sor.data(), rows, wts.data(), 10.0f, q.data(), s.data(), sa_ld);
        ASSERT_EQ(cuda::moe_swiglu_quant_f32(dhf.p, I, dsor.p, rows, dw.p, 10.0f, dq.p, ds.p, sa_ld, nullptr),
                  cudaSuccess);
      } else {
        ref::moe_swiglu_quant(h.data(), I, sor.data(), rows, wts.data(), 10.0f, true, q.data(), s.data(), sa_ld);
        ASSERT_EQ(cuda::moe_swiglu_quant(dh.p, I, dsor.p, rows, dw.p, 10.0f, true, dq.p, ds.p, sa_ld, nullptr),
                  cudaSuccess);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      // The only difference allowed: expf (GPU, <= 2 ulp) vs the host's expf can move a value across a bf16 or
      // e4m3 rounding boundary: then the code differs by one step.
      const std::vector<uint8_t> gq = dq.download();
      const std::vector<float> gs = ds.download();
      int64_t scale_diff = 0, code_diff = 0, far = 0;
      for (size_t i = 0; i < s.size(); ++i) scale_diff += f32_to_bits(gs[i]) != f32_to_bits(s[i]);
      for (size_t i = 0; i < q.size(); ++i) {
        if (gq[i] == q[i]) continue;
        ++code_diff;
        const bool same_sign = (gq[i] & 0x80) == (q[i] & 0x80);
        if (!same_sign || std::abs(int(gq[i] & 0x7f) - int(q[i] & 0x7f)) > 1) ++far;
      }
      std::printf("[swiglu_quant] %s I=%d: %lld of %zu codes one step apart, %lld scales differ\n",
                  f32 ? "fp32" : "bf16", I, (long long)code_diff, q.size(), (long long)scale_diff);
      EXPECT_EQ(far, 0);
      EXPECT_LE(code_diff, int64_t(q.size() / 1000));
      EXPECT_LE(scale_diff, 1);
    }
}

TEST(MoeW4A8Gpu, CombineBitExact) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("combine"));
  const int T = 211, topk = 6, E = 384, D = 7168, cap = 8;
  const std::vector<int> ids = random_topk(rng, T, topk, E, true);
  const int rows = E * cap;
  std::vector<int> counts(E), ros(T * topk), sor(rows);
  ref::moe_route_rows(ids.data(), T, topk, E, cap, counts.data(), ros.data(), sor.data());  // some dropped
  const std::vector<uint16_t> y2 = random_bf16(rng, size_t(rows) * D, 1.0f);
  std::vector<float> out(size_t(T) * D);
  ref::moe_combine(y2.data(), D, ros.data(), ids.data(), T, topk, out.data());
  DevBuf<uint16_t> dy(y2);
  DevBuf<int> dros(ros), dids(ids);
  DevBuf<float> dout(out.size());
  dout.poison();
  ASSERT_EQ(cuda::moe_combine(dy.p, D, dros.p, dids.p, T, topk, dout.p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> g = dout.download();
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) bad += f32_to_bits(g[i]) != f32_to_bits(out[i]);
  EXPECT_EQ(bad, 0);
}

// The decode chain (masked layout) captured in one CUDA graph: no host sync, no allocation; replays equal
// the eager run bit for bit.
TEST(MoeW4A8Gpu, DecodeChainIsGraphCapturable) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("graph"));
  const int T = 64, topk = 6, E = 16, D = 2048, I = 1024, cap = T;
  const Experts w13 = make_experts(rng, E, 2 * I, D, 0.01), w2 = make_experts(rng, E, D, I, 0.01);
  const std::vector<int> ids = random_topk(rng, T, topk, E, true);
  std::vector<float> rw(T * topk);
  for (auto& v : rw) v = float(rng() % 100) / 50.0f;
  const std::vector<uint16_t> x = random_bf16(rng, size_t(T) * D, 1.0f);
  const int rows = E * cap, sa_ld = rows;
  DevBuf<uint8_t> dw13(w13.packed), dw2(w2.packed);
  DevBuf<uint64_t> df13(w13.flags), df2(w2.flags);
  DevBuf<int> dids(ids), dcounts(E), dros(size_t(T) * topk), dsor(rows);
  DevBuf<float> drw(rw), dsa(size_t(D / 128) * sa_ld), dsa2(size_t(I / 128) * sa_ld), dout(size_t(T) * D);
  DevBuf<uint16_t> dx(x), dh(size_t(rows) * 2 * I), dy2(size_t(rows) * D);
  DevBuf<uint8_t> da(size_t(rows) * D), da2(size_t(rows) * I), ws(cuda::moe_route_rows_workspace(T, topk, E));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::MoeW4A8Weights W13{dw13.p, df13.p, E, 2 * I, D}, W2{dw2.p, df2.p, E, D, I};
  auto chain = [&]() {
    EXPECT_EQ(cuda::moe_route_rows(dids.p, T, topk, E, cap, dcounts.p, dros.p, dsor.p, ws.p, ws.n, stream), cudaSuccess);
    EXPECT_EQ(cuda::moe_gather_quant(dx.p, D, dsor.p, rows, topk, da.p, dsa.p, sa_ld, stream), cudaSuccess);
    EXPECT_EQ(cuda::moe_grouped_gemm_w4a8_masked(W13, {da.p, dsa.p, rows, sa_ld}, dcounts.p, cap, dh.p,
                                                 cuda::MoeOutType::BF16, T * topk, -1, stream),
              cudaSuccess);
    EXPECT_EQ(cuda::moe_swiglu_quant(dh.p, I, dsor.p, rows, drw.p, 10.0f, true, da2.p, dsa2.p, sa_ld, stream),
              cudaSuccess);
    EXPECT_EQ(cuda::moe_grouped_gemm_w4a8_masked(W2, {da2.p, dsa2.p, rows, sa_ld}, dcounts.p, cap, dy2.p,
                                                 cuda::MoeOutType::BF16, T * topk, -1, stream),
              cudaSuccess);
    EXPECT_EQ(cuda::moe_combine(dy2.p, D, dros.p, dids.p, T, topk, dout.p, stream), cudaSuccess);
  };
  // Unused masked rows hold whatever; clear once so NaN garbage cannot differ between runs.
  MOESERVE_CUDA_CHECK(cudaMemset(da.p, 0, da.n));
  MOESERVE_CUDA_CHECK(cudaMemset(da2.p, 0, da2.n));
  chain();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> eager = dout.download();
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  chain();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 2; ++rep) {
    dout.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::vector<float> replay = dout.download();
    int64_t diff = 0, nonfinite = 0;
    for (size_t i = 0; i < replay.size(); ++i) {
      diff += f32_to_bits(replay[i]) != f32_to_bits(eager[i]);
      nonfinite += !std::isfinite(eager[i]);
    }
    EXPECT_EQ(diff, 0);
    EXPECT_EQ(nonfinite, 0);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The decode chain's options (MoeW4A8Chain) only move W2's bytes into L2 earlier, schedule W2 before pdl_wait and take
// work items from a counter: for every config (and two splits by expert load), the chain with them equals the plain
// chain bit for bit, and the counter is 0 again after every launch (the next launches, which rely on that, would
// otherwise skip items and leave NaN rows).
// T = 5 over 16 experts gives more W13 work items than CTAs (the early stages then belong to a CTA's first item
// only); W2's K = 1024 has fewer chunks than some configs have stages.
TEST(MoeW4A8Gpu, DecodeChainOptionsChangeNothing) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(test_seed("chain_options"));
  const int topk = 6, E = 16, D = 2048, I = 1024;
  const Experts w13 = make_experts(rng, E, 2 * I, D, 0.01), w2 = make_experts(rng, E, D, I, 0.01);
  DevBuf<uint8_t> dw13(w13.packed), dw2(w2.packed);
  DevBuf<uint64_t> df13(w13.flags), df2(w2.flags);
  const cuda::MoeW4A8Weights W13{dw13.p, df13.p, E, 2 * I, D}, W2{dw2.p, df2.p, E, D, I};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int T : {1, 5}) {
    const int S = T * topk, sa_ld = (S + 3) / 4 * 4;
    const std::vector<int> ids = random_topk(rng, T, topk, E, true);
    std::vector<float> rw(static_cast<size_t>(S)), x(static_cast<size_t>(T) * D);
    for (auto& v : rw) v = float(rng() % 100) / 50.0f;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);
    DevBuf<int> dids(ids), dcounts(E), dros(S), dsor(S);
    DevBuf<float> drw(rw), dx(x), dsa(size_t(D / 128) * sa_ld), dsa2(size_t(I / 128) * sa_ld);
    DevBuf<float> dh(size_t(S) * 2 * I), dy(size_t(S) * D);
    DevBuf<uint8_t> da(size_t(S) * D), da2(size_t(S) * I);
    // W13 with settled_ids gets counts it must not read: every entry 2^30.
    DevBuf<int> dbad(std::vector<int>(size_t(E), 1 << 30));
    DevBuf<int> dcounter(std::vector<int>{0});
    // Every config alone (those of MOESERVE_TEST_W4A8_CONFIGS where set: compute-sanitizer runs), and two splits by
    // expert load (experts above 1 or 2 rows on a wide tile).
    std::vector<std::pair<int, cuda::MoeW4A8Split>> runs;
    for (int cfg = 0; cfg < cuda::moe_w4a8_config_count(); ++cfg)
      if (config_selected(cfg)) runs.push_back({cfg, {}});
    ASSERT_FALSE(runs.empty()) << "no config (MOESERVE_TEST_W4A8_CONFIGS=" << limited_configs() << ")";
    if (limited_configs().empty()) {
      runs.push_back({cuda::moe_w4a8_config_by_name("bn8_wg1_g2_s5"), {cuda::moe_w4a8_config_by_name("bn64_wg2_g1_s8"), 2}});
      runs.push_back({cuda::moe_w4a8_config_by_name("bn8_wg2_g2_s4"), {cuda::moe_w4a8_config_by_name("bn32_wg2_g2_s7"), 1}});
    }
    for (const auto& [cfg, split] : runs) {
      const std::string label = std::string(cuda::moe_w4a8_config(cfg).name) +
                                (split.config >= 0 ? std::string("+") + cuda::moe_w4a8_config(split.config).name : "");
      std::vector<float> outs[5];
      // none; prefetch + settled W2 counts; also W13 counting the settled ids; also both taking items from a counter;
      // also W2 launched while SwiGLU waits for W13
      for (int with : {0, 1, 2, 3, 4}) {
        cuda::MoeW4A8Chain c13, c2;
        if (with) {
          c13.prefetch_next = &W2;
          c13.prefix_bytes = cuda::moe_w4a8_prefetch_prefix(W2.N, W2.K, S, size_t(16) << 20);
          c2.counts_settled = true;
        }
        if (with >= 2) c13.settled_ids = dids.p;
        if (with >= 3) c13.item_counter = c2.item_counter = dcounter.p;
        dy.poison();
        ASSERT_EQ(cuda::moe_route_gather_quant_f32(dids.p, T, topk, E, dx.p, D, dcounts.p, dros.p, dsor.p, da.p, dsa.p,
                                                   sa_ld, stream),
                  cudaSuccess);
        ASSERT_EQ(cuda::moe_grouped_gemm_w4a8_contiguous(W13, {da.p, dsa.p, S, sa_ld}, with == 2 ? dbad.p : dcounts.p,
                                                         dh.p, cuda::MoeOutType::F32, 1, cfg, stream, c13, split),
                  cudaSuccess);
        ASSERT_EQ(cuda::moe_swiglu_quant_f32(dh.p, I, dsor.p, S, drw.p, 10.0f, da2.p, dsa2.p, sa_ld, stream, with == 4),
                  cudaSuccess);
        ASSERT_EQ(cuda::moe_grouped_gemm_w4a8_contiguous(W2, {da2.p, dsa2.p, S, sa_ld}, dcounts.p, dy.p,
                                                         cuda::MoeOutType::F32, 1, cfg, stream, c2, split),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        outs[with] = dy.download();
        EXPECT_EQ(dcounter.download()[0], 0) << "item counter after the chain, T " << T << " config " << label;
      }
      int64_t diff1 = 0, diff2 = 0, diff3 = 0, diff4 = 0, nonfinite = 0;
      for (size_t i = 0; i < outs[0].size(); ++i) {
        diff1 += f32_to_bits(outs[0][i]) != f32_to_bits(outs[1][i]);
        diff2 += f32_to_bits(outs[0][i]) != f32_to_bits(outs[2][i]);
        diff3 += f32_to_bits(outs[0][i]) != f32_to_bits(outs[3][i]);
        diff4 += f32_to_bits(outs[0][i]) != f32_to_bits(outs[4][i]);
        nonfinite += !std::isfinite(outs[0][i]);
      }
      EXPECT_EQ(diff1, 0) << "T " << T << " config " << label;
      EXPECT_EQ(diff2, 0) << "settled ids, T " << T << " config " << label;
      EXPECT_EQ(diff3, 0) << "item counter, T " << T << " config " << label;
      EXPECT_EQ(diff4, 0) << "W2 launched early, T " << T << " config " << label;
      EXPECT_EQ(nonfinite, 0) << "T " << T << " config " << label;
    }
  }
  // A prefix longer than a 64-row block, or not a multiple of 16 bytes, is refused.
  DevBuf<uint8_t> a1(D);
  DevBuf<float> sa1(size_t(D / 128) * 4), y1(size_t(2) * I);
  DevBuf<int> c1(E);
  for (unsigned prefix : {8u, unsigned(I / 128 * 4352 + 16)}) {
    cuda::MoeW4A8Chain bad;
    bad.prefetch_next = &W2;
    bad.prefix_bytes = prefix;
    EXPECT_EQ(cuda::moe_grouped_gemm_w4a8_contiguous(W13, {a1.p, sa1.p, 1, 4}, c1.p, y1.p, cuda::MoeOutType::F32, 1, 0,
                                                     stream, bad),
              cudaErrorInvalidValue)
        << prefix;
  }
  // Settled ids need the contiguous layout.
  cuda::MoeW4A8Chain ids;
  ids.settled_ids = c1.p;
  EXPECT_EQ(cuda::moe_grouped_gemm_w4a8_masked(W13, {a1.p, sa1.p, 1, 4}, c1.p, 1, y1.p, cuda::MoeOutType::F32, 1, 0,
                                               stream, ids),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::moe_w4a8_prefetch_prefix(W2.N, W2.K, 1, size_t(1) << 40), unsigned(I / 128 * 4352));
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace moeserve
