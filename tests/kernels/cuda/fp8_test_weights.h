#pragma once
// Random BF16 or FP8 weight matrices for the GEMM tests (stacked `count` experts), with their dequantized values
// for the double references: FP8 e4m3 with the checkpoint's 128 x 128 block scales, both as the grid itself (the
// engine's [N / 128][blk_ld] copy, GemvArgs' scale_row_shift 7) and expanded to a copy per row (shift 0).
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/ops.h"

namespace moeserve::gputest {

struct Weights {
  bool fp8 = false;
  int N = 0, K = 0, count = 1;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> q;
  std::vector<float> row_scale;  // [count * N][ceil(K/128)]
  std::vector<float> blk_scale;  // [count][ceil(N/128)][blk_ld()]: the grid itself, rows padded to 16 bytes
  std::vector<float> deq;        // dequantized [count * N][K]
  int sld() const { return (K + 127) / 128; }
  int blk_ld() const { return (sld() + 3) / 4 * 4; }
  int blk_rows() const { return (N + 127) / 128; }
};

inline Weights make_weights(bool fp8, int N, int K, int count, std::mt19937_64& g) {
  Weights w;
  w.fp8 = fp8;
  w.N = N;
  w.K = K;
  w.count = count;
  const size_t n = size_t(count) * N * K;
  auto v = normal(n, g, 1.0f / std::sqrt(float(K)));
  w.deq.resize(n);
  if (!fp8) {
    w.bf16.resize(n);
    for (size_t i = 0; i < n; ++i) {
      w.bf16[i] = f32_to_bf16(v[i]);
      w.deq[i] = bf16_to_f32(w.bf16[i]);
    }
    return w;
  }
  w.q.resize(n);
  w.row_scale.resize(size_t(count) * N * w.sld());
  w.blk_scale.assign(size_t(count) * w.blk_rows() * w.blk_ld(), 0.0f);
  for (int e = 0; e < count; ++e) {
    std::vector<uint8_t> sc(size_t((N + 127) / 128) * w.sld());
    kernels::cpu::fp8_weight_quantize(v.data() + size_t(e) * N * K, N, K, w.q.data() + size_t(e) * N * K, sc.data());
    kernels::cpu::fp8_weight_dequantize(w.q.data() + size_t(e) * N * K, DType::F8_E8M0, sc.data(), N, K,
                               w.deq.data() + size_t(e) * N * K);
    for (int r = 0; r < N; ++r)
      for (int kb = 0; kb < w.sld(); ++kb)
        w.row_scale[(size_t(e) * N + r) * w.sld() + kb] = e8m0_to_f32(sc[size_t(r / 128) * w.sld() + kb]);
    for (int br = 0; br < w.blk_rows(); ++br)
      for (int kb = 0; kb < w.sld(); ++kb)
        w.blk_scale[(size_t(e) * w.blk_rows() + br) * w.blk_ld() + kb] = e8m0_to_f32(sc[size_t(br) * w.sld() + kb]);
  }
  return w;
}

// Weights on the device (one problem, or `count` stacked experts), and the gemv weight fields pointing at them: FP8
// scales as a copy per row, or (block_scales) the 128 x 128 grid.
struct DeviceWeights {
  cuda::DeviceArray<uint16_t> wb;
  cuda::DeviceArray<uint8_t> wq;
  cuda::DeviceArray<float> ws, wsb;
  explicit DeviceWeights(const Weights& w) {
    if (w.fp8) {
      wq = dev(w.q);
      ws = dev(w.row_scale);
      wsb = dev(w.blk_scale);
    } else {
      wb = dev(w.bf16);
    }
  }
  void set(cuda::GemvArgs& a, const Weights& w, bool block_scales = false) const {
    a.wtype = w.fp8 ? cuda::WeightType::FP8 : cuda::WeightType::BF16;
    a.w = w.fp8 ? static_cast<const void*>(wq.data()) : static_cast<const void*>(wb.data());
    a.N = w.N;
    a.K = w.K;
    a.w_stride = (long long)w.N * w.K;  // stacked problems (experts), back to back
    if (w.fp8 && block_scales) {
      a.row_scale = wsb.data();
      a.scale_ld = w.blk_ld();
      a.scale_row_shift = 7;
      a.scale_stride = (long long)w.blk_rows() * w.blk_ld();
    } else {
      a.row_scale = w.fp8 ? ws.data() : nullptr;
      a.scale_ld = w.sld();
      a.scale_row_shift = 0;
      a.scale_stride = (long long)w.N * w.sld();
    }
  }
  // gemv args over these weights: M rows of x (ldx floats apart) into rows of y (ldy apart).
  cuda::GemvArgs args(const Weights& w, const float* x, int ldx, float* y, int ldy, int M,
                      bool block_scales = false) const {
    cuda::GemvArgs a;
    set(a, w, block_scales);
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.M = M;
    return a;
  }
};

}  // namespace moeserve::gputest
