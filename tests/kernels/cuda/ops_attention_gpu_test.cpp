// The KV side of attention on the GPU against the CPU reference ops, with KV state laid out as the serving
// cache lays it out (pages through a page table, rings indexed by position):
//  - compressor entry emission (softmax pool per feature + RMSNorm + RoPE at the entry's first position, plus
//    the FP8 / Hadamard+FP4 simulations), from chunk rows and ring rows; the ring update;
//  - lightning indexer scores and top-k (ties to the lower index);
//  - sparse attention with sinks over window + compressed entries (prefill and decode, split or not).
// Tolerances: the pool and the attention are weighted averages computed with the reference's operation order up
// to exp() ulps and fp32 summation order: 1e-5 of the inputs' scale. After an FP8/FP4 simulation, an element may
// land one grid step away when its pre-rounding value sits within that error of a rounding boundary, so there the
// bound is one step of the element's grid (block scale times the e4m3 / e2m1 spacing) — the simulations
// themselves are tested bit-exact in ops_basic_gpu_test.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/env.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/ops.h"

namespace moeserve {
namespace {

using namespace gputest;
namespace ref = kernels::cpu;

// One sequence (slot 1 of 2) with a chunk of `count` tokens starting at `start`; pages shuffled.
struct OneSeq {
  int start = 0, count = 0, pages = 0;
  std::vector<int> meta;  // pos, seq, id, begin, start, count, slot, page_table
  cuda::DeviceArray<int> dmeta;
  cuda::BatchDesc b;
  std::vector<int> page_table;
  OneSeq(int start_, int count_, int total_pages, std::mt19937_64& g) : start(start_), count(count_), pages(total_pages) {
    page_table.resize(size_t(pages));
    std::iota(page_table.begin(), page_table.end(), 0);
    std::shuffle(page_table.begin(), page_table.end(), g);
    for (int i = 0; i < count; ++i) meta.push_back(start + i);
    for (int i = 0; i < count; ++i) meta.push_back(0);
    for (int i = 0; i < count; ++i) meta.push_back(0);
    meta.insert(meta.end(), {0, start, count, 1});
    meta.insert(meta.end(), page_table.begin(), page_table.end());
    dmeta = dev(meta);
    const int* m = dmeta.data();
    b.T = count;
    b.S = 1;
    b.tok_pos = m;
    b.tok_seq = m + count;
    b.tok_id = m + 2 * count;
    b.seq_begin = m + 3 * count;
    b.seq_start = b.seq_begin + 1;
    b.seq_count = b.seq_begin + 2;
    b.seq_slot = b.seq_begin + 3;
    b.page_table = b.seq_begin + 4;
    b.page_ld = pages;
  }
  size_t slot_index(int entry, int epp) const { return size_t(page_table[size_t(entry / epp)]) * epp + entry % epp; }
};

float grid_step_fp8(float v, float scale) {  // e4m3 spacing at |v / scale|, times scale
  const float a = std::fabs(v / scale);
  if (a < 0.015625f) return scale * 0.001953125f;  // subnormal spacing 2^-9
  return scale * std::ldexp(1.0f, int(std::floor(std::log2(a))) - 3);
}

void compressor_case(int ratio, int dim, bool overlap, int post, int start, int count, std::mt19937_64& g) {
  const int coff = overlap ? 2 : 1, width = coff * dim, rows = coff * ratio, epp = 256 / ratio, rd = 64;
  const int nope = dim - rd;
  const int total = start + count, pages = (total + 255) / 256 + 1;
  OneSeq seq(start, count, pages, g);
  auto kv = normal(size_t(count) * 2 * width, g);  // [kv | score] per row, ld 2 * width
  for (int t = 0; t < count; ++t)
    for (int f = 0; f < width; ++f) kv[size_t(t) * 2 * width + width + f] *= 2.0f;
  auto state = normal(size_t(2) * 2 * rows * width, g);  // 2 slots
  auto norm = uniform(size_t(dim), g, 0.5f, 1.5f);
  ref::RopeTable rope(yarn_spec(), rd);
  auto dkv = dev(kv);
  auto dstate = dev(state);
  auto dnorm = dev(norm);
  auto dinv = dev(rope.inv_freq());
  auto pool = poisoned<float>(size_t(pages) * epp * dim);
  cuda::CompressorArgs a;
  a.kv = dkv.data();
  a.score = dkv.data() + width;
  a.ld = 2 * width;
  a.state = dstate.data();
  a.rows = rows;
  a.width = width;
  a.ratio = ratio;
  a.dim = dim;
  a.overlap = overlap;
  a.norm_w = dnorm.data();
  a.inv_freq = dinv.data();
  a.rope_dim = rd;
  a.post = post;
  a.nope = nope;
  a.pool = pool.data();
  a.epp = epp;
  MOESERVE_CUDA_CHECK(cuda::compressor_emit(seq.b, a, nullptr));
  MOESERVE_CUDA_CHECK(cuda::compressor_store(seq.b, a, nullptr));
  auto gpool = host(pool);
  auto gstate = host(dstate);
  // Reference: rows of position p from the chunk or (before it) the ring of slot 1.
  auto row = [&](int p, bool score) -> const float* {
    if (p >= start) return kv.data() + size_t(p - start) * 2 * width + (score ? width : 0);
    return state.data() + (size_t(1 * 2 + (score ? 1 : 0)) * rows + p % rows) * width;
  };
  std::vector<float> got, want, tol;
  int entries = 0;
  for (int p = start; p < total; ++p) {
    if ((p + 1) % ratio) continue;
    const int e = p / ratio;
    ++entries;
    const bool has_prev = overlap && e > 0;
    const int slots = (has_prev ? 2 : 1) * ratio, half = overlap ? dim : 0;
    std::vector<float> skv(size_t(slots) * dim), ssc(size_t(slots) * dim);
    int s = 0;
    if (has_prev)
      for (int q = (e - 1) * ratio; q < e * ratio; ++q, ++s) {
        std::copy_n(row(q, false), dim, skv.begin() + size_t(s) * dim);
        std::copy_n(row(q, true), dim, ssc.begin() + size_t(s) * dim);
      }
    for (int q = e * ratio; q < (e + 1) * ratio; ++q, ++s) {
      std::copy_n(row(q, false) + half, dim, skv.begin() + size_t(s) * dim);
      std::copy_n(row(q, true) + half, dim, ssc.begin() + size_t(s) * dim);
    }
    std::vector<float> out(static_cast<size_t>(dim));
    ref::softmax_pool(skv.data(), ssc.data(), slots, dim, out.data());
    ref::rms_norm(out.data(), 1, dim, norm.data(), 1e-6f);
    rope.apply(out.data(), 1, dim, int64_t(e) * ratio);
    std::vector<float> pre = out;
    std::vector<float> step(size_t(dim), 0.0f);
    if (post == 1) {
      ref::fp8_block_sim(out.data(), 1, dim, nope, 64);
      for (int b0 = 0; b0 < nope; b0 += 64) {
        float amax = 0;
        for (int i = b0; i < std::min(nope, b0 + 64); ++i) amax = std::max(amax, std::fabs(pre[size_t(i)]));
        const float sc = ref::fp8_pow2_scale(amax);
        for (int i = b0; i < std::min(nope, b0 + 64); ++i) step[size_t(i)] = grid_step_fp8(out[size_t(i)], sc);
      }
    } else if (post == 2) {
      ref::hadamard_rotate(out.data(), 1, dim);
      std::vector<float> rot = out;
      ref::fp4_block_sim(out.data(), 1, dim, 32);
      for (int b0 = 0; b0 < dim; b0 += 32) {
        float amax = 0;
        for (int i = b0; i < b0 + 32; ++i) amax = std::max(amax, std::fabs(rot[size_t(i)]));
        for (int i = b0; i < b0 + 32; ++i) step[size_t(i)] = 2.0f * ref::fp4_pow2_scale(amax);
      }
    }
    const float scale = max_abs(pre);
    for (int f = 0; f < dim; ++f) {
      got.push_back(gpool[seq.slot_index(e, epp) * dim + f]);
      want.push_back(out[size_t(f)]);
      tol.push_back(1e-5f * scale + 1.001f * step[size_t(f)]);
    }
  }
  ASSERT_GT(entries, 0);
  expect_close(got, want, tol,
               "compressor ratio " + std::to_string(ratio) + " dim " + std::to_string(dim) + " post " +
                   std::to_string(post) + " start " + std::to_string(start) + " count " + std::to_string(count));
  // Ring: the last `rows` tokens of the chunk now hold their rows; older rows untouched.
  for (int p = std::max(start, total - rows); p < total; ++p)
    for (int f = 0; f < width; f += 97) {
      ASSERT_EQ(gstate[(size_t(1 * 2) * rows + p % rows) * width + f], kv[size_t(p - start) * 2 * width + f]);
      ASSERT_EQ(gstate[(size_t(1 * 2 + 1) * rows + p % rows) * width + f], kv[size_t(p - start) * 2 * width + width + f]);
    }
}

TEST(CudaKv, CompressorEmitAndRing) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  // C4 main (overlap, fp8 sim of 448 dims), the indexer's (dim 128, Hadamard + FP4), C128; prefill from 0,
  // a chunk in the middle (entries spanning ring and chunk rows) and single-token decode steps.
  for (int post : {0, 1}) {
    compressor_case(4, 512, true, post, 0, 37, g);
    compressor_case(4, 512, true, post, 1001, 9, g);
    compressor_case(4, 512, true, post, 4095, 1, g);
    compressor_case(128, 512, false, post, 0, 300, g);
    compressor_case(128, 512, false, post, 1000, 24, g);
    compressor_case(128, 512, false, post, 4223, 1, g);
  }
  for (int post : {0, 2}) {
    compressor_case(4, 128, true, post, 0, 64, g);
    compressor_case(4, 128, true, post, 517, 3, g);
  }
}

TEST(CudaKv, IndexerScoresAndTopK) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  // Rows of up to 1024 / 2048 / 4096 / 8192 keys and past: every register-cached variant of the top-k kernel.
  struct Case { int heads, dim, start, count, k; bool ties; };
  for (Case c : {Case{64, 128, 8000, 1, 512, false}, Case{64, 128, 0, 200, 512, false}, Case{64, 128, 2040, 16, 512, true},
                 Case{4, 32, 0, 40, 4, false}, Case{64, 128, 30000, 2, 1024, false}, Case{64, 128, 100, 3, 16, true},
                 Case{4, 32, 20000, 2, 3000, true}, Case{4, 32, 40000, 2, 700, true},
                 Case{4, 32, 12000, 2, 512, false}}) {
    const int ratio = 4, epp = 64, total = c.start + c.count, pages = (total + 255) / 256 + 1;
    OneSeq seq(c.start, c.count, pages, g);
    auto keys = normal(size_t(pages) * epp * c.dim, g);
    auto q = normal(size_t(c.count) * c.heads * c.dim, g);
    auto w = normal(size_t(c.count) * c.heads, g);
    if (c.ties)  // every entry one of 7 key vectors: many equal scores
      for (int i = 0; i < pages * epp; ++i) {
        const int src = int(seq.slot_index(i % 7, epp));
        if (i % 7 != i) std::copy_n(keys.data() + size_t(src) * c.dim, c.dim, keys.data() + seq.slot_index(i, epp) * c.dim);
      }
    const float scale = 1.0f / std::sqrt(float(c.dim));
    const int max_keys = total / ratio, ld = max_keys;
    auto dk = dev(keys);
    auto dq = dev(q);
    auto dw = dev(w);
    auto scores = poisoned<float>(size_t(c.count) * ld);
    MOESERVE_CUDA_CHECK(cuda::indexer_scores(seq.b, dq.data(), dw.data(), c.heads, c.dim, dk.data(), epp, ratio, scale,
                                             max_keys, scores.data(), ld, nullptr));
    auto idx = poisoned<int>(size_t(c.count) * c.k);
    MOESERVE_CUDA_CHECK(cuda::indexer_topk(seq.b, scores.data(), ld, ratio, c.k, idx.data(), nullptr));
    auto gs = host(scores);
    auto gi = host(idx);
    std::vector<float> got, want, tol;
    for (int t = 0; t < c.count; ++t) {
      const int valid = (c.start + t + 1) / ratio;
      std::vector<float> kk(size_t(valid) * c.dim), sc(static_cast<size_t>(valid));
      for (int i = 0; i < valid; ++i)
        std::copy_n(keys.data() + seq.slot_index(i, epp) * c.dim, c.dim, kk.begin() + size_t(i) * c.dim);
      ref::indexer_scores(q.data() + size_t(t) * c.heads * c.dim, w.data() + size_t(t) * c.heads, c.heads, c.dim,
                          kk.data(), valid, scale, sc.data());
      for (int i = 0; i < valid; ++i) {
        double a = 0;
        for (int h = 0; h < c.heads; ++h) {
          double d = 0;
          for (int f = 0; f < c.dim; ++f)
            d += std::fabs(double(q[(size_t(t) * c.heads + h) * c.dim + f]) * kk[size_t(i) * c.dim + f]);
          a += d * scale * std::fabs(w[size_t(t) * c.heads + h]);
        }
        got.push_back(gs[size_t(t) * ld + i]);
        want.push_back(sc[size_t(i)]);
        tol.push_back(float(1e-5 * a));
      }
      // Top-k of the GPU's own scores must be exactly the set the reference top_k chooses from them, in ascending
      // index order (the kernel's contract: no sort by score).
      std::vector<int32_t> top = ref::top_k(gs.data() + size_t(t) * ld, valid, c.k);
      std::sort(top.begin(), top.end());
      for (int j = 0; j < c.k; ++j) {
        const int expect = j < int(top.size()) ? top[size_t(j)] : -1;
        ASSERT_EQ(gi[size_t(t) * c.k + j], expect) << "token " << t << " rank " << j << " (valid " << valid << ")";
      }
    }
    expect_close(got, want, tol, "indexer scores heads " + std::to_string(c.heads) + " start " + std::to_string(c.start));
  }
}

// Values as the checkpoint numerics' FP4 simulation leaves them: e2m1 times a power of two per 32-block.
std::vector<float> fp4_values(size_t n, std::mt19937_64& g) {
  static const float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::uniform_int_distribution<int> code(0, 15), expo(-4, 3);
  std::vector<float> v(n);
  for (size_t b = 0; b < n; b += 32) {
    const float scale = std::ldexp(1.0f, expo(g));
    for (size_t i = b; i < std::min(n, b + 32); ++i) {
      const int c = code(g);
      v[i] = (c & 8 ? -1.0f : 1.0f) * kE2m1[c & 7] * scale;
    }
  }
  return v;
}

// The tensor-core scores on FP4-simulated queries and keys (exact in bf16): against the reference with the fp32
// summation-order bound of the test above, at decode (one token, partial last tile) and prefill (each token its own
// key count) shapes; scores past a token's keys stay untouched.
TEST(CudaKv, IndexerScoresBf16OnFp4Values) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  EXPECT_FALSE(cuda::indexer_scores_bf16_fits(32, 128));
  EXPECT_FALSE(cuda::indexer_scores_bf16_fits(64, 64));
  const int heads = 64, dim = 128, ratio = 4, epp = 64;
  struct Case { int start, count; };
  for (Case c : {Case{8000, 1}, Case{0, 300}, Case{1021, 7}, Case{30000, 2}}) {
    const int total = c.start + c.count, pages = (total + 255) / 256 + 1;
    OneSeq seq(c.start, c.count, pages, g);
    auto keys = fp4_values(size_t(pages) * epp * dim, g);
    auto q = fp4_values(size_t(c.count) * heads * dim, g);
    auto w = normal(size_t(c.count) * heads, g);
    const float scale = 1.0f / std::sqrt(float(dim));
    const int max_keys = total / ratio, ld = max_keys;
    auto dk = dev(keys);
    auto dq = dev(q);
    auto dw = dev(w);
    auto scores = poisoned<float>(size_t(c.count) * ld);
    ASSERT_EQ(cuda::indexer_scores_bf16(seq.b, dq.data(), dw.data(), heads, dim, dk.data(), epp, ratio, scale, max_keys,
                                        scores.data(), ld, nullptr),
              cudaSuccess);
    auto gs = host(scores);
    std::vector<float> got, want, tol;
    for (int t = 0; t < c.count; ++t) {
      const int valid = (c.start + t + 1) / ratio;
      std::vector<float> kk(size_t(valid) * dim), sc(static_cast<size_t>(valid));
      for (int i = 0; i < valid; ++i)
        std::copy_n(keys.data() + seq.slot_index(i, epp) * dim, dim, kk.begin() + size_t(i) * dim);
      ref::indexer_scores(q.data() + size_t(t) * heads * dim, w.data() + size_t(t) * heads, heads, dim, kk.data(),
                          valid, scale, sc.data());
      for (int i = 0; i < valid; ++i) {
        double a = 0;
        for (int h = 0; h < heads; ++h) {
          double d = 0;
          for (int f = 0; f < dim; ++f)
            d += std::fabs(double(q[(size_t(t) * heads + h) * dim + f]) * kk[size_t(i) * dim + f]);
          a += d * scale * std::fabs(w[size_t(t) * heads + h]);
        }
        got.push_back(gs[size_t(t) * ld + i]);
        want.push_back(sc[size_t(i)]);
        tol.push_back(float(1e-5 * a));
      }
      for (int i = valid; i < ld; ++i) ASSERT_TRUE(std::isnan(gs[size_t(t) * ld + i])) << "token " << t << " key " << i;
    }
    expect_close(got, want, tol, "bf16 indexer scores start " + std::to_string(c.start));
  }
}

// An attention call's geometry: heads, head and rope dims, window (the ring's capacity too), the ring's layers and
// this layer, compression ratio (0: none) with entries per page, top-k (k) or all entries, and the step's last
// position + 1 (total), which bounds the keys.
struct AttentionShape {
  int H, hd, rd, W, layers, layer, ratio, epp, k, total;
  bool indexed;
};
cuda::AttentionArgs attention_args(const AttentionShape& c, const float* q, const float* kv, const float* window,
                                   const float* comp, const float* sinks, const float* inv_freq, const int* topk) {
  cuda::AttentionArgs a;
  a.q = q;
  a.kv = kv;
  a.view.window = const_cast<float*>(window);
  a.view.layer = c.layer;
  a.view.num_layers = c.layers;
  a.view.cap = c.W;
  a.view.hd = c.hd;
  a.view.compressed = c.ratio ? const_cast<float*>(comp) : nullptr;
  a.view.epp = c.epp;
  a.H = c.H;
  a.hd = c.hd;
  a.window = c.W;
  a.ratio = c.ratio;
  a.topk = c.indexed ? topk : nullptr;
  a.k = c.k;
  a.max_keys = c.W + (c.ratio ? (c.indexed ? std::min(c.k, c.total / c.ratio) : c.total / c.ratio) : 0);
  a.sinks = sinks;
  a.scale = 1.0f / std::sqrt(float(c.hd));
  a.inv_freq = inv_freq;
  a.rope_dim = c.rd;
  return a;
}

// MOESERVE_TEST_ATTENTION_CASES=few: each attention test keeps only its smallest cases. Under compute-sanitizer's
// racecheck one prefill-chunk case takes minutes (seventy-eighth session: 170 s did not finish one), so
// scripts/device-sanitize.sh sets it for its racecheck runs.
bool few_cases() {
  static const bool on = env_is("MOESERVE_TEST_ATTENTION_CASES", "few");
  return on;
}

// fp8_keys: the keys' non-rope dims FP8-simulated as the checkpoint numerics store them; then the tensor-core kernel
// runs too, on the same inputs and against the same reference and bound.
void attention_case(int H, int hd, int ratio, bool indexed, int start, int count, int k, std::mt19937_64& g,
                    bool fp8_keys = false) {
  const int W = 128, cap = W, layers = 3, layer = 1, rd = 64 <= hd / 2 ? 64 : 16;
  const int total = start + count, epp = ratio ? 256 / ratio : 1, pages = (total + 255) / 256 + 1;
  OneSeq seq(start, count, pages, g);
  auto q = normal(size_t(count) * H * hd, g);
  auto kv = normal(size_t(count) * hd, g);
  auto window = normal(size_t(2) * layers * cap * hd, g);
  auto comp = normal(size_t(pages) * std::max(epp, 1) * hd, g);
  if (fp8_keys)
    for (std::vector<float>* keys : {&kv, &window, &comp})
      ref::fp8_block_sim(keys->data(), int64_t(keys->size()) / hd, hd, hd - rd, 64);
  auto sinks = normal(size_t(H), g);
  ref::RopeTable rope(yarn_spec(), rd);
  std::vector<int> topk;
  if (indexed) {  // k distinct valid entries per token (or all when fewer), then -1
    topk.assign(size_t(count) * k, -1);
    for (int t = 0; t < count; ++t) {
      const int valid = (start + t + 1) / ratio;
      std::vector<int> perm(static_cast<size_t>(valid));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), g);
      for (int j = 0; j < std::min(k, valid); ++j) topk[size_t(t) * k + j] = perm[size_t(j)];
    }
  }
  auto dq = dev(q);
  auto dkv = dev(kv);
  auto dwin = dev(window);
  auto dcomp = dev(comp);
  auto dsink = dev(sinks);
  auto dinv = dev(rope.inv_freq());
  cuda::DeviceArray<int> dtop = indexed ? dev(topk) : cuda::DeviceArray<int>();
  cuda::AttentionArgs a = attention_args({H, hd, rd, W, layers, layer, ratio, epp, k, total, indexed}, dq.data(),
                                         dkv.data(), dwin.data(), dcomp.data(), dsink.data(), dinv.data(), dtop.data());
std::vector<float> want(size_t(count) * H * hd);
  float kmax = 0;
  for (int t = 0; t < count; ++t) {
    const int p = start + t;
    std::vector<const float*> keys;
    for (int kp = std::max(0, p - W + 1); kp <= p; ++kp)
      keys.push_back(kp >= start ? kv.data() + size_t(kp - start) * hd
                                 : window.data() + ((size_t(1) * layers + layer) * cap + kp % cap) * hd);
    if (ratio) {
      const int valid = (p + 1) / ratio;
      if (!indexed)
        for (int i = 0; i < valid; ++i) keys.push_back(comp.data() + seq.slot_index(i, epp) * hd);
      else
        for (int j = 0; j < std::min(k, valid); ++j) keys.push_back(comp.data() + seq.slot_index(topk[size_t(t) * k + j], epp) * hd);
    }
    for (const float* kp : keys)
      for (int d = 0; d < hd; ++d) kmax = std::max(kmax, std::fabs(kp[d]));
    float* out = want.data() + size_t(t) * H * hd;
    ref::sink_attention(q.data() + size_t(t) * H * hd, H, hd, keys.data(), int64_t(keys.size()), sinks.data(),
                        1.0f / std::sqrt(float(hd)), out);
    rope.apply(out, H, hd, p, /*inverse=*/true);
  }
  // Each kernel at one split, the splits attention_splits picks, and 3, 7 and 13 (the tensor-core kernel may take
  // fewer): the combine's load batches of 1, 2, 4 and 8 splits per warp.
  using Kernel = cudaError_t (*)(const cuda::BatchDesc&, const cuda::AttentionArgs&, cudaStream_t);
  auto check = [&](Kernel kernel, const std::string& name) {
    for (int splits : {1, cuda::attention_splits(count, H, a.max_keys), 3, 7, 13}) {
      cuda::DeviceArray<float> part(std::max<size_t>(1, cuda::attention_workspace_floats(count, H, hd, splits)), "p");
      auto o = poisoned<float>(size_t(count) * H * hd);
      a.o = o.data();
      a.partial = part.data();
      a.splits = splits;
      MOESERVE_CUDA_CHECK(kernel(seq.b, a, nullptr));
      const std::string what = name + " H " + std::to_string(H) + " ratio " + std::to_string(ratio) +
                               (indexed ? " top-k" : "") + " start " + std::to_string(start) + " count " +
                               std::to_string(count) + " splits " + std::to_string(splits);
      const std::vector<float> combined = host(o);
      expect_close_rel(combined, want, 0.0f, 2e-5f * kmax, what);
      if (kernel != cuda::sparse_attention || splits == 1) continue;
      // The splits adding themselves up on arrival counters (GpuModel's default): the same bound, twice in a row
      // (each launch leaves the counters zero for the next), and with too few counters (the combine launch).
      cuda::DeviceArray<int> arrivals(size_t(count) * H / 4 + 1, "arrivals");
      arrivals.fill_bytes(0);
      a.arrivals = arrivals.data();
      for (int slots : {int(arrivals.size()), int(arrivals.size()), 0}) {
        a.arrival_slots = slots;
        auto o2 = poisoned<float>(size_t(count) * H * hd);
        a.o = o2.data();
        MOESERVE_CUDA_CHECK(kernel(seq.b, a, nullptr));
        const std::vector<float> got = host(o2);
        expect_close_rel(got, want, 0.0f, 2e-5f * kmax, what + " self-combined, slots " + std::to_string(slots));
        for (int v : host(arrivals)) ASSERT_EQ(v, 0) << what << ": an arrival counter left non-zero";
        if (slots == 0) ASSERT_EQ(got, combined) << what << ": too few counters must take the combine launch";
      }
      a.arrivals = nullptr;
      a.arrival_slots = 0;
    }
  };
  check(cuda::sparse_attention, "attention");
  if (!fp8_keys) return;
  ASSERT_TRUE(cuda::sparse_attention_mma_fits(H, hd, rd, a.max_keys));
  check(cuda::sparse_attention_mma, "tensor-core attention");
  // The same with the keys converted once into a key image (poisoned first: rows the step cannot reach stay so).
  a.image_comp = ratio ? total / ratio : 0;
  auto image = poisoned<uint16_t>(cuda::attention_key_image_elems(count, 1, W, a.image_comp));
  a.key_image = image.data();
  check(cuda::sparse_attention_mma, "tensor-core attention, key image");
}

TEST(CudaAttention, SparseAttentionWithSinks) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  // V4-Flash shapes (H 64, hd 512): decode at a long position with C4 top-512, then (after a tiny head_dim's prefill
  // chunk) with C128; window-only; prefill chunks crossing the window ring; V4-Pro's 128 heads.
  attention_case(64, 512, 4, true, 6000, 1, 512, g);
  attention_case(4, 64, 4, true, 10, 9, 4, g);
  if (few_cases()) return;  // the two cases above only
  attention_case(64, 512, 128, false, 9000, 2, 0, g);
  attention_case(64, 512, 0, false, 300, 1, 0, g);
  attention_case(64, 512, 4, true, 100, 48, 512, g);
  attention_case(64, 512, 128, false, 200, 70, 0, g);
  attention_case(128, 512, 4, true, 5000, 3, 1024, g);
}

// The tensor-core kernel on keys as the checkpoint numerics store them (FP8-simulated non-rope dims, fp32 rope
// dims), at the shapes it serves: V4-Flash prefill chunks (C4 top-512 with partial key tiles, C128 crossing the
// window ring, window only), one token, and V4-Pro's 128 heads. Other shapes are refused.
TEST(CudaAttention, TensorCoresOnFp8Keys) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  EXPECT_FALSE(cuda::sparse_attention_mma_fits(64, 256, 64, 640));
  EXPECT_FALSE(cuda::sparse_attention_mma_fits(48, 512, 64, 640));
  EXPECT_FALSE(cuda::sparse_attention_mma_fits(64, 512, 32, 640));
  EXPECT_FALSE(cuda::sparse_attention_mma_fits(64, 512, 64, 4096));
  attention_case(64, 512, 4, true, 6000, 1, 512, g, true);
  if (few_cases()) return;  // the one decode token above only
  attention_case(64, 512, 4, true, 100, 48, 512, g, true);
  attention_case(64, 512, 4, true, 3000, 40, 512, g, true);
  attention_case(64, 512, 128, false, 200, 70, 0, g, true);
  attention_case(64, 512, 0, false, 5, 37, 0, g, true);
  attention_case(128, 512, 4, true, 5000, 3, 1024, g, true);
}

// The key image (AttentionArgs::key_image) in a step of several sequences: each sequence's ring rows and compressed
// entries at their own place in it. The tiles hold the same bf16 values either way, so the outputs must be the
// per-block conversion's bit for bit (that form is checked against the reference above).
TEST(CudaAttention, TensorCoresKeyImageMatchesPerBlockConversion) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  const int H = 64, hd = 512, rd = 64, W = 128, cap = W, layers = 3, layer = 1, k = 512;
  struct Seq { int start, count; };
  const std::vector<Seq> seqs = few_cases() ? std::vector<Seq>{{20, 1}, {131, 9}}
                                             : std::vector<Seq>{{0, 70}, {300, 33}, {5000, 40}, {20, 1}, {131, 9}};
  const int S = int(seqs.size());
  int T = 0, max_total = 0;
  for (const Seq& q : seqs) {
    T += q.count;
    max_total = std::max(max_total, q.start + q.count);
  }
  for (int ratio : few_cases() ? std::vector<int>{4} : std::vector<int>{4, 128, 0}) {
    const bool indexed = ratio == 4;
    const int epp = ratio ? 256 / ratio : 1, page_ld = (max_total + 255) / 256 + 1, pages = S * page_ld;
    std::vector<int> pos, seq_of, ids, begin, start, count, slot, table(static_cast<size_t>(pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), g);  // each sequence's pages: a disjoint shuffled run
    for (int s = 0; s < S; ++s) {
      begin.push_back(int(pos.size()));
      start.push_back(seqs[size_t(s)].start);
      count.push_back(seqs[size_t(s)].count);
      slot.push_back(S - 1 - s);
      for (int i = 0; i < seqs[size_t(s)].count; ++i) {
        pos.push_back(seqs[size_t(s)].start + i);
        seq_of.push_back(s);
        ids.push_back(0);
      }
    }
    std::vector<int> meta;
    for (const std::vector<int>* v : {&pos, &seq_of, &ids, &begin, &start, &count, &slot, &table})
      meta.insert(meta.end(), v->begin(), v->end());
    auto dmeta = dev(meta);
    cuda::BatchDesc b;
    b.T = T;
    b.S = S;
    b.tok_pos = dmeta.data();
    b.tok_seq = b.tok_pos + T;
    b.tok_id = b.tok_seq + T;
    b.seq_begin = b.tok_id + T;
    b.seq_start = b.seq_begin + S;
    b.seq_count = b.seq_start + S;
    b.seq_slot = b.seq_count + S;
    b.page_table = b.seq_slot + S;
    b.page_ld = page_ld;
    auto fp8_keys = [&](size_t rows) {
      auto v = normal(rows * hd, g);
      ref::fp8_block_sim(v.data(), int64_t(rows), hd, hd - rd, 64);
      return dev(v);
    };
    auto dq = dev(normal(size_t(T) * H * hd, g));
    auto dkv = fp8_keys(size_t(T));
    auto dwin = fp8_keys(size_t(S) * layers * cap);
    auto dcomp = fp8_keys(size_t(pages) * epp);
    auto dsink = dev(normal(size_t(H), g));
    ref::RopeTable rope(yarn_spec(), rd);
    auto dinv = dev(rope.inv_freq());
    std::vector<int> topk(size_t(T) * k, -1);
    for (int t = 0; t < T && indexed; ++t) {
      const int valid = (pos[size_t(t)] + 1) / ratio;
      std::vector<int> perm(static_cast<size_t>(valid));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), g);
      for (int j = 0; j < std::min(k, valid); ++j) topk[size_t(t) * k + j] = perm[size_t(j)];
    }
    auto dtop = dev(topk);
    cuda::AttentionArgs a = attention_args({H, hd, rd, W, layers, layer, ratio, epp, k, max_total, indexed},
                                           dq.data(), dkv.data(), dwin.data(), dcomp.data(), dsink.data(), dinv.data(),
                                           dtop.data());
    a.keys_bf16_nope = true;
    ASSERT_TRUE(cuda::sparse_attention_mma_fits(H, hd, rd, a.max_keys));
    const int comp = ratio ? max_total / ratio : 0;
    auto image = poisoned<uint16_t>(cuda::attention_key_image_elems(T, S, W, comp));
    for (int splits : {1, cuda::attention_splits(T, H, a.max_keys), 5}) {
      cuda::DeviceArray<float> part(std::max<size_t>(1, cuda::attention_workspace_floats(T, H, hd, splits)), "p");
      a.partial = part.data();
      a.splits = splits;
      std::vector<float> out[2];
      for (int with_image : {0, 1}) {
        auto o = poisoned<float>(size_t(T) * H * hd);
        a.o = o.data();
        a.key_image = with_image ? image.data() : nullptr;
        a.image_comp = with_image ? comp : 0;
        MOESERVE_CUDA_CHECK(cuda::sparse_attention_mma(b, a, nullptr));
        out[with_image] = host(o);
      }
      expect_same_bits(out[1], out[0], "key image, ratio " + std::to_string(ratio) + " splits " + std::to_string(splits));
    }
  }
}

}  // namespace
}  // namespace moeserve
