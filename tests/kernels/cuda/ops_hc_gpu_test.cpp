// mHC on the GPU (hc_mix_partial + hc_pre_finish, hc_post) against kernels/cpu/hyper_connection.h.
// Tolerance: the mixes differ from the reference only by fp32 summation order over hc*D terms (the GPU splits
// the width across blocks and adds the splits in double), ~1e-6 of sum|h*fn|; sigmoid, softmax and Sinkhorn
// are well conditioned, so pre/post/comb agree to ~1e-5 absolute; the collapse adds 4 products per element.
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
    for (int T : {1, 3, 33}) {
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
      for (bool norm : {false, true}) {
        auto gcol = poisoned<float>(col.size());
        auto gpost = poisoned<float>(post.size());
        auto gcomb = poisoned<float>(comb.size());
        MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(dh.data(), T, width, dfn.data(), mix, splits, partial.data(), nullptr));
        MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial.data(), splits, dh.data(), T, hc, D, mix, db.data(), ds.data(), 20,
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
        expect_close(host(gcol), want, tol, std::string(norm ? "hc_pre+norm collapsed" : "hc_pre collapsed") + tag);
        expect_close_rel(host(gpost), post, 0.0f, 2e-5f, "hc_pre post" + tag);
        expect_close_rel(host(gcomb), comb, 0.0f, 2e-5f, "hc_pre comb" + tag);
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

}  // namespace
}  // namespace moeserve
