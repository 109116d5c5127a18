// mHC on the GPU (hc_mix_partial + hc_pre_finish, hc_post) against kernels/cpu/hyper_connection.h.
// Tolerance: the mixes differ from the reference only by fp32 summation order over hc*D terms (the GPU splits
// the width across blocks and adds the splits in double), ~1e-6 of sum|h*fn|; sigmoid, softmax and Sinkhorn
// are well conditioned, so pre/post/comb agree to ~1e-5 absolute; the collapse adds 4 products per element.
#include <cmath>
#include <cstring>

#include "kernels/cpu/hyper_connection.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/ops.h"

namespace moeserve {
namespace {

using namespace gputest;
namespace ref = kernels::cpu;

TEST(CudaOps, HyperConnectionPreHeadPost) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (int D : {64, 4096, 7168, 8200}) {  // 8200: longer than one pass of the finish kernel's collapse threads
    // 2050: hc_mix_partial's 8-token blocks (the reference's cost: small D only); 300 and 2050: hc_pre_finish's
    // warp-per-token post and Sinkhorn (T >= 264), at D 4096 over 64 splits.
    for (int T : {1, 3, 33, 300, 2050}) {
      if (T > 33 && D > 64 && !(T == 300 && D == 4096)) continue;
      const int hc = 4, mix = 24, width = hc * D;
      auto h = normal(size_t(T) * width, g);
      auto fn = uniform(size_t(mix) * width, g, -0.02f, 0.02f);
      auto base = uniform(size_t(mix), g);
      auto scale = uniform(3, g, 0.5f, 1.5f);
      auto nw = uniform(size_t(D), g, 0.5f, 1.5f);
      auto dh = dev(h);
      auto dfn = dev(fn);
      auto db = dev(base);
      auto ds = dev(scale);
      auto dnw = dev(nw);
      const int splits = cuda::hc_mix_splits(width);
      cuda::DeviceArray<float> partial(size_t(splits) * T * (mix + 1), "partial");
      ref::HyperConnectionParams p{fn.data(), base.data(), scale.data(), hc, D, 20, 1e-6f, 1e-6f};
      std::vector<float> col(size_t(T) * D), post(size_t(T) * hc), comb(size_t(T) * hc * hc);
      ref::hc_pre(p, h.data(), T, col.data(), post.data(), comb.data());
      const std::string tag = " D=" + std::to_string(D) + " T=" + std::to_string(T);
      // Decode's split count, and prefill's (hc_mix_splits(width, 4096)).
      for (int mix_splits : {splits, cuda::hc_mix_splits(width, 4096)})
      for (bool norm : {false, true}) {
        const std::string stag = tag + " splits " + std::to_string(mix_splits);
        auto gcol = poisoned<float>(col.size());
        auto gpost = poisoned<float>(post.size());
        auto gcomb = poisoned<float>(comb.size());
        MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(dh.data(), T, width, dfn.data(), mix, mix_splits, partial.data(), nullptr));
        MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial.data(), mix_splits, dh.data(), T, hc, D, mix, db.data(), ds.data(), 20,
                                                1e-6f, 1e-6f, norm ? dnw.data() : nullptr, gcol.data(), gpost.data(),
                                                gcomb.data(), nullptr));
        std::vector<float> want = col;
        if (norm) ref::rms_norm(want.data(), T, D, nw.data(), 1e-6f);
        std::vector<float> tol(want.size());
        for (int t = 0; t < T; ++t)
          for (int d = 0; d < D; ++d) {
            float s = 0;
            for (int j = 0; j < hc; ++j) s += std::fabs(h[size_t(t) * width + size_t(j) * D + d]);
            tol[size_t(t) * D + d] = norm ? 3e-5f * (std::fabs(want[size_t(t) * D + d]) + 1.0f) : 3e-5f * s;
          }
        expect_close(host(gcol), want, tol, std::string(norm ? "hc_pre+norm collapsed" : "hc_pre collapsed") + stag);
        expect_close_rel(host(gpost), post, 0.0f, 2e-5f, "hc_pre post" + stag);
        expect_close_rel(host(gcomb), comb, 0.0f, 2e-5f, "hc_pre comb" + stag);
      }
      // hc_post, in place, from the reference's post/comb.
      auto y = normal(size_t(T) * D, g);
      auto dy = dev(y);
      auto dpost = dev(post);
      auto dcomb = dev(comb);
      auto hh = dev(h);
      MOESERVE_CUDA_CHECK(cuda::hc_post(hh.data(), T, hc, D, dy.data(), dpost.data(), dcomb.data(), nullptr));
      std::vector<float> want = h;
      ref::hc_post(p, want.data(), T, y.data(), post.data(), comb.data());
      expect_close_rel(host(hh), want, 1e-6f, 1e-6f, "hc_post" + tag);
      // hc_head (4 mixes, no Sinkhorn) with the final norm.
      auto hfn = uniform(size_t(hc) * width, g, -0.02f, 0.02f);
      auto hbase = uniform(size_t(hc), g);
      std::vector<float> hscale = {1.3f};
      auto dhfn = dev(hfn);
      auto dhb = dev(hbase);
      auto dhs = dev(hscale);
      cuda::DeviceArray<float> partial4(size_t(splits) * T * (hc + 1), "partial");
      auto out = poisoned<float>(size_t(T) * D);
      MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(dh.data(), T, width, dhfn.data(), hc, splits, partial4.data(), nullptr));
      MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial4.data(), splits, dh.data(), T, hc, D, hc, dhb.data(), dhs.data(), 0,
                                              1e-6f, 1e-6f, dnw.data(), out.data(), nullptr, nullptr, nullptr));
      std::vector<float> hw(size_t(T) * D);
      ref::hc_head(hfn.data(), hbase.data(), hscale.data(), hc, D, 1e-6f, 1e-6f, h.data(), T, hw.data());
      ref::rms_norm(hw.data(), T, D, nw.data(), 1e-6f);
      expect_close_rel(host(out), hw, 3e-5f, 3e-5f, "hc_head+norm" + tag);
    }
  }
}

// hc_mix_partial at prefill sizes (from 2048 tokens: 32-token tiles through shared memory) against double sums, with
// uneven splits of the width and empty trailing splits (64 splits of 4096 columns in 128-column tiles). Bound: each
// partial is a lane's sequential fp32 sum of up to width / 32 products, then a 5-level tree and the splits' double
// sum, so |error| <= (width / 32 + 6) * 2^-24 * sum |terms| (sequential summation's gamma_n).
TEST(CudaOps, HyperConnectionMixPartialPrefillTiles) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  const int T = 2050;
  for (int D : {1024, 4096}) {
    for (int mix : {24, 4}) {
      const int width = 4 * D;
      auto h = normal(size_t(T) * width, g);
      auto fn = uniform(size_t(mix) * width, g, -0.02f, 0.02f);
      std::vector<double> want(size_t(T) * (mix + 1)), mag(want.size());
      for (int t = 0; t < T; ++t) {
        const float* ht = h.data() + size_t(t) * width;
        for (int m = 0; m <= mix; ++m) {
          const float* f = m < mix ? fn.data() + size_t(m) * width : ht;
          double s = 0, a = 0;
          for (int e = 0; e < width; ++e) {
            const double p = double(ht[e]) * double(f[e]);
            s += p;
            a += std::fabs(p);
          }
          want[size_t(t) * (mix + 1) + m] = s;
          mag[size_t(t) * (mix + 1) + m] = a;
        }
      }
      auto dh = dev(h);
      auto dfn = dev(fn);
      std::vector<int> split_counts = {cuda::hc_mix_splits(width, T), 1, 3};
      if (D == 1024) split_counts.push_back(cuda::hc_mix_splits(width));  // 64: half of them empty
      for (int splits : split_counts) {
        cuda::DeviceArray<float> partial(size_t(splits) * T * (mix + 1), "partial");
        partial.fill_bytes(0xff);  // NaN: every split's row must be written, the empty ones too
        MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(dh.data(), T, width, dfn.data(), mix, splits, partial.data(), nullptr));
        const auto got = host(partial);
        const double gamma = double(width / 32 + 6) * std::ldexp(1.0, -24);
        int bad = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          double s = 0;
          for (int k = 0; k < splits; ++k) s += double(got[size_t(k) * want.size() + i]);
          if (!(std::fabs(s - want[i]) <= gamma * mag[i]) && bad++ < 5)
            ADD_FAILURE() << "D=" << D << " mix=" << mix << " splits=" << splits << " t=" << i / (mix + 1)
                          << " m=" << i % (mix + 1) << ": " << s << " vs " << want[i] << " (bound " << gamma * mag[i] << ")";
        }
        EXPECT_EQ(bad, 0) << "D=" << D << " mix=" << mix << " splits=" << splits;
      }
    }
  }
}

// hc_pre_finish split into Collapse (critical path) and Mix (post + Sinkhorn comb, a side stream): each part is
// bit for bit its share of the All launch and leaves the other part's outputs untouched (a finite pattern,
// checked to survive). Mix is given no h, norm_w or collapsed row to read; Collapse no post or comb to write.
TEST(CudaOps, HyperConnectionPreFinishSplitIntoCollapseAndMix) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  const float pattern = std::bit_cast<float>(0x5a5a5a5au);
  auto patterned = [](size_t n) {
    cuda::DeviceArray<float> a(n, "untouched output");
    a.fill_bytes(0x5a);
    return a;
  };
  const auto all = cuda::HcFinishPart::All, collapse = cuda::HcFinishPart::Collapse, mixp = cuda::HcFinishPart::Mix;
  for (int D : {4096, 7168}) {
    for (int T : {1, 5, 300}) {  // 300: the warp-per-token Mix (T >= 264)
      const int hc = 4, mix = 24, width = hc * D;
      auto dh = dev(normal(size_t(T) * width, g));
      auto dfn = dev(uniform(size_t(mix) * width, g, -0.02f, 0.02f));
      auto db = dev(uniform(size_t(mix), g));
      auto ds = dev(uniform(3, g, 0.5f, 1.5f));
      auto dnw = dev(uniform(size_t(D), g, 0.5f, 1.5f));
      const int splits = cuda::hc_mix_splits(width);
      cuda::DeviceArray<float> partial(size_t(splits) * T * (mix + 1), "partial");
      MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(dh.data(), T, width, dfn.data(), mix, splits, partial.data(), nullptr));
      auto finish = [&](const float* h, const float* nw, float* col, float* post, float* comb, cuda::HcFinishPart part) {
        return cuda::hc_pre_finish(partial.data(), splits, h, T, hc, D, mix, db.data(), ds.data(), 20, 1e-6f, 1e-6f,
                                   nw, col, post, comb, nullptr, part);
      };
      for (bool norm : {false, true}) {
        const std::string tag = " D=" + std::to_string(D) + " T=" + std::to_string(T) + (norm ? " norm" : "");
        const float* nw = norm ? dnw.data() : nullptr;
        auto col = poisoned<float>(size_t(T) * D);
        auto post = poisoned<float>(size_t(T) * hc);
        auto comb = poisoned<float>(size_t(T) * hc * hc);
        MOESERVE_CUDA_CHECK(finish(dh.data(), nw, col.data(), post.data(), comb.data(), all));
        auto col_c = poisoned<float>(col.size());
        auto post_c = patterned(post.size()), comb_c = patterned(comb.size());
        auto col_m = patterned(col.size());
        auto post_m = poisoned<float>(post.size()), comb_m = poisoned<float>(comb.size());
        MOESERVE_CUDA_CHECK(finish(dh.data(), nw, col_c.data(), post_c.data(), comb_c.data(), collapse));
        MOESERVE_CUDA_CHECK(finish(nullptr, nullptr, col_m.data(), post_m.data(), comb_m.data(), mixp));
        expect_same_bits(host(col_c), host(col), "Collapse collapsed" + tag);
        expect_same_bits(host(post_m), host(post), "Mix post" + tag);
        expect_same_bits(host(comb_m), host(comb), "Mix comb" + tag);
        expect_same_bits(host(post_c), std::vector<float>(post.size(), pattern), "Collapse left post" + tag);
        expect_same_bits(host(comb_c), std::vector<float>(comb.size(), pattern), "Collapse left comb" + tag);
        expect_same_bits(host(col_m), std::vector<float>(col.size(), pattern), "Mix left collapsed" + tag);
        // Collapse needs no post/comb at all (the critical path's launch), and Mix no collapsed row.
        auto col_n = poisoned<float>(col.size());
        MOESERVE_CUDA_CHECK(finish(dh.data(), nw, col_n.data(), nullptr, nullptr, collapse));
        expect_same_bits(host(col_n), host(col), "Collapse without post/comb" + tag);
        auto post_n = poisoned<float>(post.size()), comb_n = poisoned<float>(comb.size());
        MOESERVE_CUDA_CHECK(finish(nullptr, nullptr, nullptr, post_n.data(), comb_n.data(), mixp));
        expect_same_bits(host(post_n), host(post), "Mix without collapsed post" + tag);
        expect_same_bits(host(comb_n), host(comb), "Mix without collapsed comb" + tag);
      }
      EXPECT_EQ(finish(nullptr, nullptr, nullptr, nullptr, nullptr, mixp), cudaErrorInvalidValue) << "Mix without post";
      // Head mode (mix == hc): Collapse is All; Mix has nothing to compute and is refused.
      auto dhfn = dev(uniform(size_t(hc) * width, g, -0.02f, 0.02f));
      auto dhb = dev(uniform(size_t(hc), g));
      auto dhs = dev(std::vector<float>{1.3f});
      cuda::DeviceArray<float> partial4(size_t(splits) * T * (hc + 1), "partial");
      MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(dh.data(), T, width, dhfn.data(), hc, splits, partial4.data(), nullptr));
      auto head = [&](float* out, float* post, float* comb, cuda::HcFinishPart part) {
        return cuda::hc_pre_finish(partial4.data(), splits, dh.data(), T, hc, D, hc, dhb.data(), dhs.data(), 0, 1e-6f,
                                   1e-6f, dnw.data(), out, post, comb, nullptr, part);
      };
      auto out_all = poisoned<float>(size_t(T) * D), out_c = poisoned<float>(size_t(T) * D);
      MOESERVE_CUDA_CHECK(head(out_all.data(), nullptr, nullptr, all));
      MOESERVE_CUDA_CHECK(head(out_c.data(), nullptr, nullptr, collapse));
      expect_same_bits(host(out_c), host(out_all), "head Collapse" + std::string(" D=") + std::to_string(D));
      auto post4 = patterned(size_t(T) * hc), comb4 = patterned(size_t(T) * hc * hc);
      EXPECT_EQ(head(out_c.data(), post4.data(), comb4.data(), mixp), cudaErrorInvalidValue) << "head Mix";
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    }
  }
}

// hc_post fused with the next mix (decode path): the updated streams match hc_post, and the partials it leaves
// give hc_pre_finish the same pre/post/comb and collapsed row as the reference's hc_post then hc_pre (a block's
// mix of 24) or hc_head (the head's mix of 4).
TEST(CudaOps, HyperConnectionPostFusedWithNextMix) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (int D : {64, 96, 4096, 7168}) {
    for (int T : {1, 3, 8}) {
      const int hc = 4, width = hc * D;
      const std::string tag = " D=" + std::to_string(D) + " T=" + std::to_string(T);
      auto h = normal(size_t(T) * width, g);
      auto y = normal(size_t(T) * D, g);
      auto post = uniform(size_t(T) * hc, g, 0.0f, 2.0f);
      auto comb = uniform(size_t(T) * hc * hc, g, 0.0f, 0.5f);
      auto nw = uniform(size_t(D), g, 0.5f, 1.5f);
      for (int mix : {24, 4}) {
        auto fn = uniform(size_t(mix) * width, g, -0.02f, 0.02f);
        auto base = uniform(size_t(mix), g);
        auto scale = uniform(3, g, 0.5f, 1.5f);
        ref::HyperConnectionParams p{fn.data(), base.data(), scale.data(), hc, D, 20, 1e-6f, 1e-6f};
        std::vector<float> want_h = h;
        ref::hc_post(p, want_h.data(), T, y.data(), post.data(), comb.data());
        auto dh = dev(h);
        auto dy = dev(y);
        auto dpost = dev(post);
        auto dcomb = dev(comb);
        auto dfn = dev(fn);
        auto db = dev(base);
        auto ds = dev(scale);
        auto dnw = dev(nw);
        const int splits = cuda::hc_post_mix_splits(hc, D);
        cuda::DeviceArray<float> partial(size_t(splits) * T * (mix + 1), "partial");
        MOESERVE_CUDA_CHECK(cuda::hc_post_mix(dh.data(), T, hc, D, dy.data(), dpost.data(), dcomb.data(), dfn.data(),
                                              mix, partial.data(), nullptr));
        expect_close_rel(host(dh), want_h, 1e-6f, 1e-6f, "hc_post_mix streams mix=" + std::to_string(mix) + tag);
        auto out = poisoned<float>(size_t(T) * D);
        if (mix == 24) {
          auto gpost = poisoned<float>(size_t(T) * hc);
          auto gcomb = poisoned<float>(size_t(T) * hc * hc);
          MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial.data(), splits, dh.data(), T, hc, D, mix, db.data(),
                                                  ds.data(), 20, 1e-6f, 1e-6f, dnw.data(), out.data(), gpost.data(),
                                                  gcomb.data(), nullptr));
          std::vector<float> col(size_t(T) * D), rpost(size_t(T) * hc), rcomb(size_t(T) * hc * hc);
          ref::hc_pre(p, want_h.data(), T, col.data(), rpost.data(), rcomb.data());
          ref::rms_norm(col.data(), T, D, nw.data(), 1e-6f);
          expect_close_rel(host(out), col, 3e-5f, 3e-5f, "hc_post_mix -> hc_pre+norm collapsed" + tag);
          expect_close_rel(host(gpost), rpost, 0.0f, 2e-5f, "hc_post_mix -> hc_pre post" + tag);
          expect_close_rel(host(gcomb), rcomb, 0.0f, 2e-5f, "hc_post_mix -> hc_pre comb" + tag);
        } else {
          MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial.data(), splits, dh.data(), T, hc, D, hc, db.data(),
                                                  ds.data(), 0, 1e-6f, 1e-6f, dnw.data(), out.data(), nullptr, nullptr,
                                                  nullptr));
          std::vector<float> hw(size_t(T) * D);
          ref::hc_head(fn.data(), base.data(), scale.data(), hc, D, 1e-6f, 1e-6f, want_h.data(), T, hw.data());
          ref::rms_norm(hw.data(), T, D, nw.data(), 1e-6f);
          expect_close_rel(host(out), hw, 3e-5f, 3e-5f, "hc_post_mix -> hc_head+norm" + tag);
        }
      }
    }
  }
}

// The MoE combine folded into hc_post_mix (HcAddRows): the same streams and partials as moe_combine into y
// followed by the plain hc_post_mix, bit for bit.
TEST(CudaOps, HyperConnectionPostMixAddsExpertRowsLikeCombine) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  const int hc = 4, K = 6, mix = 24;
  for (int D : {96, 4096}) {
    for (int T : {1, 5}) {
      const int width = hc * D, rows = T * K + 3;
      const std::string tag = " D=" + std::to_string(D) + " T=" + std::to_string(T);
      auto h = normal(size_t(T) * width, g);
      auto y = normal(size_t(T) * D, g);
      auto ye = normal(size_t(rows) * D, g);
      auto post = uniform(size_t(T) * hc, g, 0.0f, 2.0f);
      auto comb = uniform(size_t(T) * hc * hc, g, 0.0f, 0.5f);
      auto fn = uniform(size_t(mix) * width, g, -0.02f, 0.02f);
      std::vector<int> ros(size_t(T) * K);
      for (size_t i = 0; i < ros.size(); ++i) ros[i] = int((i * 7 + 2) % size_t(rows));
      auto dros = dev(ros);
      auto dye = dev(ye);
      auto dpost = dev(post);
      auto dcomb = dev(comb);
      auto dfn = dev(fn);
      const int splits = cuda::hc_post_mix_splits(hc, D);
      // Separate: combine into a copy of y, then hc_post_mix.
      auto dh1 = dev(h);
      auto dy1 = dev(y);
      cuda::DeviceArray<float> p1(size_t(splits) * T * (mix + 1), "p1"), p2(size_t(splits) * T * (mix + 1), "p2");
      MOESERVE_CUDA_CHECK(cuda::moe_combine(dye.data(), D, dros.data(), T, K, dy1.data(), nullptr));
      MOESERVE_CUDA_CHECK(cuda::hc_post_mix(dh1.data(), T, hc, D, dy1.data(), dpost.data(), dcomb.data(), dfn.data(),
                                            mix, p1.data(), nullptr));
      // Folded.
      auto dh2 = dev(h);
      auto dy2 = dev(y);
      MOESERVE_CUDA_CHECK(cuda::hc_post_mix(dh2.data(), T, hc, D, dy2.data(), dpost.data(), dcomb.data(), dfn.data(),
                                            mix, p2.data(), nullptr, {dye.data(), dros.data(), K}));
      const std::vector<float> h1 = host(dh1), h2 = host(dh2), q1 = host(p1), q2 = host(p2);
      int64_t diff = 0;
      for (size_t i = 0; i < h1.size(); ++i) diff += std::memcmp(&h1[i], &h2[i], 4) != 0 || !std::isfinite(h1[i]);
      for (size_t i = 0; i < q1.size(); ++i) diff += std::memcmp(&q1[i], &q2[i], 4) != 0;
      EXPECT_EQ(diff, 0) << tag;
      EXPECT_EQ(host(dy2), y) << "y itself is not written" << tag;
    }
  }
}

}  // namespace
}  // namespace moeserve
