#include "kernels/cpu/moe_w4a8.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/threads.h"
#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cpu/quant.h"

namespace moeserve::kernels::cpu {

float act_quant_scale(float amax) { return fp8_pow2_scale(amax); }

void act_quant_fp8(const float* x, int n, uint8_t* q, float* scales, int scale_stride) {
  for (int g = 0; g < n / 128; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[g * 128 + i]));
    float s = act_quant_scale(amax);
    for (int i = 0; i < 128; ++i) q[g * 128 + i] = f32_to_fp8_e4m3_saturate(x[g * 128 + i] / s);
    scales[size_t(g) * scale_stride] = s;
  }
}

namespace {

// Row start of expert e in the grouped layout.
std::vector<int64_t> row_starts(const int* counts, int E, int cap) {
  std::vector<int64_t> start(E);
  int64_t run = 0;
  for (int e = 0; e < E; ++e) {
    start[e] = cap > 0 ? int64_t(e) * cap : run;
    run += counts[e];
  }
  return start;
}

}  // namespace

void moe_grouped_gemm_w4a8(const uint8_t* a, const float* sa, int sa_ld, const uint8_t* w, const uint8_t* sw,
                           const int* counts, int E, int N, int K, int cap, float* y) {
  const std::vector<int64_t> start = row_starts(counts, E, cap);
  std::vector<float> ws, as;
  for (int e = 0; e < E; ++e) {
    const int m_count = cap > 0 ? std::min(counts[e], cap) : counts[e];
    if (m_count <= 0) continue;
    // Exact scaled operands: e4m3 * 2^k and e2m1 * 2^k are fp32-exact, and so is their product.
    as.assign(size_t(m_count) * K, 0.0f);
    for (int m = 0; m < m_count; ++m) {
      const int64_t row = start[e] + m;
      for (int k = 0; k < K; ++k)
        as[size_t(m) * K + k] = fp8_e4m3_to_f32(a[row * K + moe_w4a8_act_pos(k)]) * sa[size_t(k / 128) * sa_ld + row];
    }
    ws.assign(size_t(N) * K, 0.0f);
    const uint8_t* we = w + size_t(e) * N * (K / 2);
    const uint8_t* se = sw + size_t(e) * N * (K / 32);
    parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int k = 0; k < K; ++k) {
          uint8_t nib = (we[n * (K / 2) + k / 2] >> ((k & 1) * 4)) & 0xf;
          ws[size_t(n) * K + k] = fp4_e2m1_to_f32(nib) * e8m0_to_f32(se[n * (K / 32) + k / 32]);
        }
    });
    parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const float* wr = ws.data() + size_t(n) * K;
        for (int m = 0; m < m_count; ++m) {
          const float* ar = as.data() + size_t(m) * K;
          float acc = 0.0f;
          for (int k = 0; k < K; ++k) acc += ar[k] * wr[k];
          y[(start[e] + m) * N + n] = acc;
        }
      }
    });
  }
}

void moe_route_rows(const int* topk_ids, int T, int topk, int E, int cap, int* counts, int* row_of_slot,
                    int* slot_of_row) {
  const int S = T * topk;
  std::vector<int> total(E, 0);
  for (int s = 0; s < S; ++s) total[topk_ids[s]]++;
  std::vector<int64_t> start(E);
  int64_t run = 0;
  for (int e = 0; e < E; ++e) {
    start[e] = cap > 0 ? int64_t(e) * cap : run;
    run += total[e];
    counts[e] = cap > 0 ? std::min(total[e], cap) : total[e];
  }
  const int64_t rows = cap > 0 ? int64_t(E) * cap : S;
  for (int64_t r = 0; r < rows; ++r) slot_of_row[r] = -1;
  std::vector<int> rank(E, 0);
  for (int s = 0; s < S; ++s) {
    int e = topk_ids[s];
    int k = rank[e]++;
    if (cap > 0 && k >= cap) {
      row_of_slot[s] = -1;
      continue;
    }
    int64_t row = start[e] + k;
    row_of_slot[s] = int(row);
    slot_of_row[row] = s;
  }
}

namespace {

float to_f32(uint16_t bf16) { return bf16_to_f32(bf16); }
float to_f32(float v) { return v; }

template <class In>
void gather_quant(const In* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a, float* sa, int sa_ld) {
  parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> xf(D);
    for (int64_t r = r0; r < r1; ++r) {
      int s = slot_of_row[r];
      if (s < 0) continue;
      const In* xr = x + size_t(s / topk) * D;
      for (int d = 0; d < D; ++d) xf[d] = to_f32(xr[d]);
      act_quant_fp8(xf.data(), D, a + r * D, sa + r, sa_ld);
      moe_w4a8_order_activations(a + r * D, D);
    }
  });
}

template <class In>
void swiglu_quant(const In* h, int I, const int* slot_of_row, int rows, const float* weights, float limit,
                  bool round_bf16, uint8_t* a2, float* sa2, int sa_ld) {
  parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> xf(I);
    for (int64_t r = r0; r < r1; ++r) {
      int s = slot_of_row[r];
      if (s < 0) continue;
      const In* hr = h + size_t(r) * 2 * I;
      for (int i = 0; i < I; ++i) {
        float g = std::min(to_f32(hr[i]), limit);
        float u = std::min(std::max(to_f32(hr[I + i]), -limit), limit);
        float x = g / (1.0f + std::exp(-g)) * u;
        x = weights[s] * x;
        xf[i] = round_bf16 ? round_to_bf16(x) : x;
      }
      act_quant_fp8(xf.data(), I, a2 + r * I, sa2 + r, sa_ld);
      moe_w4a8_order_activations(a2 + r * I, I);
    }
  });
}

}  // namespace

void moe_gather_quant(const uint16_t* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a, float* sa,
                      int sa_ld) {
  gather_quant(x, D, slot_of_row, rows, topk, a, sa, sa_ld);
}
void moe_gather_quant_f32(const float* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a, float* sa,
                          int sa_ld) {
  gather_quant(x, D, slot_of_row, rows, topk, a, sa, sa_ld);
}

void moe_swiglu_quant(const uint16_t* h, int I, const int* slot_of_row, int rows, const float* weights,
                      float limit, bool round_bf16, uint8_t* a2, float* sa2, int sa_ld) {
  swiglu_quant(h, I, slot_of_row, rows, weights, limit, round_bf16, a2, sa2, sa_ld);
}
void moe_swiglu_quant_f32(const float* h, int I, const int* slot_of_row, int rows, const float* weights,
                          float limit, uint8_t* a2, float* sa2, int sa_ld) {
  swiglu_quant(h, I, slot_of_row, rows, weights, limit, false, a2, sa2, sa_ld);
}

void moe_combine(const uint16_t* y2, int D, const int* row_of_slot, const int* topk_ids, int T, int topk,
                 float* out) {
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    std::vector<std::pair<int, int>> order(topk);
    for (int64_t t = t0; t < t1; ++t) {
      for (int j = 0; j < topk; ++j) order[j] = {topk_ids[t * topk + j], row_of_slot[t * topk + j]};
      std::stable_sort(order.begin(), order.end());
      float* o = out + t * D;
      for (int d = 0; d < D; ++d) o[d] = 0.0f;
      for (const auto& [e, row] : order) {
        if (row < 0) continue;
        const uint16_t* yr = y2 + size_t(row) * D;
        for (int d = 0; d < D; ++d) o[d] += bf16_to_f32(yr[d]);
      }
    }
  });
}

}  // namespace moeserve::kernels::cpu
