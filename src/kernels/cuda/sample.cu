// Next-token sampling on the GPU (kernels/cuda/ops.h sample_rows; reference engine/sampler.cpp). Ranks are
// composite 64-bit keys (logit order, then lower id first), so top-k is a radix select on the keys by count and
// top-p one by probability mass; the token is the first id (id order) whose cumulative probability exceeds u, as
// the reference draws it.
//
// Each row is split into slices of ~4096 ids, one block each (32 blocks at V4's 129280 ids), and every phase is a
// kernel over rows x slices: one block per row had left 131 SMs idle and made each pass one SM's latency. What a
// phase hands the next goes through global memory, always as values the next phase combines in a fixed order
// (slice maxima, slice sums) or as exact integers (histograms), so a row's token does not depend on the batch or
// on the order blocks run in.
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSlices = 32;  // one warp combines a row's slice values
constexpr int kSliceIds = 4096;  // a slice's target length
constexpr int kSegIds = 128;     // the draw's unit: a warp's 4 ids a lane
constexpr int kPasses = 8;       // 8-bit digits of a 64-bit key
constexpr int kDigits = 256;

struct Layout {
  int slices, slice_len, segments;
};
__host__ __device__ inline Layout layout_of(int vocab) {
  int s = (vocab + kSliceIds - 1) / kSliceIds;
  s = s < 1 ? 1 : s > kMaxSlices ? kMaxSlices : s;
  const int len = ((vocab + s - 1) / s + kSegIds - 1) / kSegIds * kSegIds;  // a multiple of 128: 16-byte aligned
  return {(vocab + len - 1) / len, len, (vocab + kSegIds - 1) / kSegIds};
}

// A radix select's progress after a pass: the digits chosen so far (prefix under mask), the measure still wanted
// among the keys matching them, the next digit's shift, and the mode: selecting; find (this pass looks for the
// answer: the chosen digit holds no more keys than are wanted); found (the answer is in RowWork::found); done (the
// answer is the prefix).
enum : int { kSelecting = 0, kFind = 1, kFound = 2, kDone = 3 };
struct SelectState {
  unsigned long long prefix, mask, remaining;
  int shift, mode;
};

// Per row (selects: 0 top-k by count, 1 top-p by mass).
struct RowWork {
  unsigned long long slice_best[kMaxSlices];  // each slice's largest key
  double slice_sum[kMaxSlices];               // weights over the top-k set
  double slice_sum2[kMaxSlices];              // weights over the top-p set
  SelectState state[2][kPasses + 1];          // after each pass; written by the row's slice-0 block
  unsigned long long found[2];                // a find pass's answer (min for top-k, max for top-p)
  unsigned long long measure[2][kPasses][kDigits];  // per pass and digit: count (top-k) or fixed-point mass
  unsigned count[2][kPasses][kDigits];
};
// The draw's 128-id segments: probability mass, first and last id with mass (INT_MAX / -1 if none).
struct Segment {
  double mass;
  int first, last;
};

enum : int { kStepTopK = 1, kStepTopP = 2, kStepDraw = 4 };

struct Args {
  const float* logits;
  int vocab;
  const SampleRow* rows;
  int* tokens;
  float* probs;  // optional
  double* w;     // [rows, vocab] weights
  RowWork* rw;   // [rows]
  Segment* seg;  // [rows, segments]
  int steps;     // kStep*: the phases launched (a phase left out acts as off)
};

__device__ __forceinline__ bool greedy(const SampleRow& r, const Args& a) {
  return r.temperature <= 0.0f || !(a.steps & kStepDraw);
}
__device__ __forceinline__ bool top_k_on(const SampleRow& r, const Args& a) {
  return !greedy(r, a) && (a.steps & kStepTopK) && r.top_k > 0 && r.top_k < a.vocab;
}
__device__ __forceinline__ bool top_p_on(const SampleRow& r, const Args& a) {
  return !greedy(r, a) && (a.steps & kStepTopP) && r.top_p < 1.0f;
}

__device__ __forceinline__ unsigned long long rank_key(float logit, int id) {
  const uint32_t u = __float_as_uint(logit);
  const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(k) << 32) | static_cast<unsigned long long>(0xffffffffu - uint32_t(id));
}
__device__ __forceinline__ int id_of(unsigned long long key) { return int(0xffffffffu - uint32_t(key & 0xffffffffu)); }
__device__ __forceinline__ float logit_of(unsigned long long key) {  // rank_key's inverse (no load of the logit)
  const uint32_t k = uint32_t(key >> 32);
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long n = __shfl_xor_sync(0xffffffffu, v, o);
    v = n > v ? n : v;
  }
  return v;
}
__device__ __forceinline__ unsigned long long warp_min_u64(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long n = __shfl_xor_sync(0xffffffffu, v, o);
    v = n < v ? n : v;
  }
  return v;
}

// Per-slice values combined by each warp that asks (every lane of it): one load a lane, then a butterfly whose
// partners add the same two values, so every lane of every kernel gets the same bits. (A loop over the slices
// waited an L2 round trip per slice.)
__device__ __forceinline__ double slices_sum(const double* v, int slices) {
  const int lane = int(threadIdx.x) & 31;
  return warp_sum(lane < slices ? v[lane] : 0.0);
}
__device__ __forceinline__ unsigned long long row_top(const RowWork& rw, int slices) {
  const int lane = int(threadIdx.x) & 31;
  return warp_max_u64(lane < slices ? rw.slice_best[lane] : 0ull);
}
__device__ __forceinline__ unsigned long long select_answer(const RowWork& rw, int sel) {
  const int mode = rw.state[sel][kPasses].mode;
  const unsigned long long prefix = rw.state[sel][kPasses].prefix, found = rw.found[sel];  // loaded together
  return mode == kDone ? prefix : found;
}

// This block's part of a phase: row, slice [i0, i1), the row's logits, weights and work.
struct Slice {
  int r, s, i0, i1;
  Layout L;
  SampleRow row;
  const float* l;
  double* w;
  RowWork* rw;
};
// The settings were uploaded before the first of the sampler's kernels, so every later one may read them before
// its pdl_wait (the kernel before it has passed its own wait: the first kernel has started).
__device__ __forceinline__ Slice slice_of(const Args& a) {
  Slice x;
  x.r = int(blockIdx.y);
  x.s = int(blockIdx.x);
  x.L = layout_of(a.vocab);
  x.i0 = x.s * x.L.slice_len;
  x.i1 = min(a.vocab, x.i0 + x.L.slice_len);
  x.row = a.rows[x.r];
  x.l = a.logits + size_t(x.r) * a.vocab;
  x.w = a.w + size_t(x.r) * a.vocab;
  x.rw = a.rw + x.r;
  return x;
}

// A pass over ids [i0, i1) of a row: f(i, logit, weight, valid) for each of this thread's ids (weight 0 unless
// Weights). Every thread of the block runs the same trip count, so f may use warp collectives. Each thread issues
// Batch loads before using any, 16-byte vectors where the row allows (vocab % 4 == 0 and aligned rows; i0 is a
// multiple of 128).
template <int Batch, bool Weights, class F>
__device__ __forceinline__ void for_ids(const float* l, const double* w, int vocab, int i0, int i1, F&& f) {
  const int step = int(blockDim.x), tid = int(threadIdx.x);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(l) | (Weights ? reinterpret_cast<uintptr_t>(w) : 0);
  if (vocab % 4 == 0 && addr % 16 == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const double2* w2 = reinterpret_cast<const double2*>(w);
    const int q0 = i0 / 4, q1 = i1 / 4;
    for (int base = q0; base < q1; base += Batch * step) {
      float4 v[Batch];
      double2 a[Weights ? Batch : 1], b[Weights ? Batch : 1];
#pragma unroll
      for (int j = 0; j < Batch; ++j) {
        const int q = base + j * step + tid;
        v[j] = q < q1 ? l4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if constexpr (Weights) {
          a[j] = q < q1 ? w2[2 * q] : make_double2(0.0, 0.0);
          b[j] = q < q1 ? w2[2 * q + 1] : make_double2(0.0, 0.0);
        }
      }
#pragma unroll
      for (int j = 0; j < Batch; ++j) {
        const int q = base + j * step + tid;
        const bool ok = q < q1;
        f(4 * q, v[j].x, Weights ? a[j].x : 0.0, ok);
        f(4 * q + 1, v[j].y, Weights ? a[j].y : 0.0, ok);
        f(4 * q + 2, v[j].z, Weights ? b[j].x : 0.0, ok);
        f(4 * q + 3, v[j].w, Weights ? b[j].y : 0.0, ok);
      }
    }
    return;
  }
  for (int base = i0; base < i1; base += 4 * Batch * step) {
    float v[4 * Batch];
    double x[Weights ? 4 * Batch : 1];
#pragma unroll
    for (int j = 0; j < 4 * Batch; ++j) {
      const int i = base + j * step + tid;
      v[j] = i < i1 ? l[i] : 0.0f;
      if constexpr (Weights) x[j] = i < i1 ? w[i] : 0.0;
    }
#pragma unroll
    for (int j = 0; j < 4 * Batch; ++j) {
      const int i = base + j * step + tid;
      f(i, v[j], Weights ? x[j] : 0.0, i < i1);
    }
  }
}

// Phase 1: each slice's largest key; clears the histograms of the selects the row runs.
__global__ void __launch_bounds__(kThreads) sample_max_kernel(Args a) {
  pdl_begin();
  __shared__ unsigned long long s_best[kWarps];
  const Slice x = slice_of(a);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  for (int sel = 0; sel < 2; ++sel) {
    if (!(sel == 0 ? top_k_on(x.row, a) : top_p_on(x.row, a))) continue;
    unsigned long long* m = &x.rw->measure[sel][0][0];
    unsigned* c = &x.rw->count[sel][0][0];
    for (int i = x.s * kThreads + tid; i < kPasses * kDigits; i += x.L.slices * kThreads) {
      m[i] = 0;
      c[i] = 0;
    }
  }
  if (x.s == 0 && tid == 0) {
    x.rw->found[0] = ~0ull;
    x.rw->found[1] = 0;
  }
  unsigned long long best = 0;
  for_ids<4, false>(x.l, nullptr, a.vocab, x.i0, x.i1, [&](int i, float li, double, bool ok) {
    const unsigned long long k = ok ? rank_key(li, i) : 0ull;
    best = k > best ? k : best;
  });
  best = warp_max_u64(best);
  if (lane == 0) s_best[warp] = best;
  __syncthreads();
  if (tid == 0) {
    for (int i = 0; i < kWarps; ++i) best = s_best[i] > best ? s_best[i] : best;
    x.rw->slice_best[x.s] = best;
  }
}

// Each warp's own histogram (dynamic shared memory). Keys cluster in a few digits (logits share their top exponent
// bits): with one histogram for the block, the warps' atomics on the same few words serialise.
constexpr size_t kPrivateHistBytes = size_t(kWarps) * kDigits * (sizeof(unsigned long long) + sizeof(unsigned));

// One pass of a radix select, 8 bits a pass from the top: the largest key t such that the keys >= t reach `need`,
// each key counting 1 (top-k: t is the need-th largest key) or, under Mass, its weight as 60-bit fixed point
// (weight * 2^60 / sum, rounded: integer sums are exact in any order, so the histogram is deterministic; keys of
// no mass are left out, and they are the lowest: under the top-k cut, or underflowed). Pass p first picks the
// digit of pass p - 1 from its histogram (every block of the row alike: the same integers give the same digit),
// then histograms its slice's next digit. Once the chosen digit holds no more keys than are still wanted (under
// Mass: one key), the answer is its lowest (only) key and this pass finds it instead. Pass kPasses only picks.
template <bool Mass>
__global__ void __launch_bounds__(kThreads) sample_select_kernel(Args a, int pass) {
  extern __shared__ unsigned long long private_hist[];
  __shared__ unsigned long long s_measure[kDigits];
  __shared__ unsigned s_count[kDigits];
  __shared__ SelectState s_state;
  __shared__ unsigned long long s_found;
  const Slice x = slice_of(a);  // before the wait: see slice_of
  pdl_begin();
  if (!(Mass ? top_p_on(x.row, a) : top_k_on(x.row, a))) return;
  const int sel = Mass ? 1 : 0, tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  RowWork& rw = *x.rw;
  // What the pass reads from the passes before, loaded together (one memory round trip, not three).
  SelectState st;
  unsigned long long measure = 0;
  unsigned count = 0;
  if (pass > 0) {
    st = rw.state[sel][pass - 1];
    measure = rw.measure[sel][pass - 1][tid];
    count = rw.count[sel][pass - 1][tid];
  }
  const double sum_part = Mass && lane < x.L.slices ? rw.slice_sum[lane] : 0.0;
  if (pass == 0) {
    st.prefix = st.mask = 0;
    st.remaining = Mass ? static_cast<unsigned long long>(double(x.row.top_p) * 0x1p60)
                        : static_cast<unsigned long long>(x.row.top_k);
    st.shift = 56;
    st.mode = kSelecting;
  } else {
    if (st.mode == kFind) st.mode = kFound;
    if (st.mode == kSelecting) {
      s_measure[tid] = measure;
      s_count[tid] = count;
      __syncthreads();
      if (warp == 0) {  // lane l owns digits 255 - 8l ... 248 - 8l; a scan from the top finds the digit
        if (lane == 0) {  // unreachable fallback (the matching keys always reach `remaining`): keep the prefix
          s_state = st;
          s_state.mode = kDone;
        }
        __syncwarp();
        unsigned long long local = 0;
        for (int u = 0; u < 8; ++u) local += s_measure[255 - (lane * 8 + u)];
        const unsigned long long incl = warp_inclusive_sum(local);
        const unsigned hit = __ballot_sync(0xffffffffu, incl >= st.remaining);
        if (hit && lane == __ffs(hit) - 1) {
          unsigned long long cum = incl - local;
          int digit = 0;
          for (int u = 0; u < 8; ++u) {
            const int dg = 255 - (lane * 8 + u);
            if (cum + s_measure[dg] >= st.remaining) {
              digit = dg;
              break;
            }
            cum += s_measure[dg];
          }
          SelectState n = st;
          n.remaining = st.remaining - cum;
          n.prefix = st.prefix | (static_cast<unsigned long long>(digit) << st.shift);
          n.mask = st.mask | (255ull << st.shift);
          const bool single =
              Mass ? s_count[digit] == 1u : static_cast<unsigned long long>(s_count[digit]) == n.remaining;
          n.mode = st.shift == 0 ? kDone : single ? kFind : kSelecting;
          n.shift = st.shift - 8;
          s_state = n;
        }
      }
      __syncthreads();
      st = s_state;
    }
  }
  if (x.s == 0 && tid == 0) rw.state[sel][pass] = st;
  if (st.mode != kFind && st.mode != kSelecting) return;  // (block-uniform)
  const double scale = Mass ? 0x1p60 / warp_sum(sum_part) : 0.0;  // slices_sum's bits
  if (st.mode == kFind) {
    if (tid == 0) s_found = Mass ? 0ull : ~0ull;
    __syncthreads();
    unsigned long long mine = Mass ? 0ull : ~0ull;
    for_ids<Mass ? 2 : 4, Mass>(x.l, x.w, a.vocab, x.i0, x.i1, [&](int i, float li, double wi, bool ok) {
      const unsigned long long k = rank_key(li, i);
      if (!ok || (k & st.mask) != st.prefix) return;
      if constexpr (Mass) {
        if (__double2ull_rn(wi * scale) > 0) mine = k > mine ? k : mine;
      } else {
        mine = k < mine ? k : mine;
      }
    });
    mine = Mass ? warp_max_u64(mine) : warp_min_u64(mine);
    if (lane == 0) {
      if constexpr (Mass)
        atomicMax(&s_found, mine);
      else
        atomicMin(&s_found, mine);
    }
    __syncthreads();
    if (tid == 0) {
      if constexpr (Mass)
        atomicMax(&rw.found[sel], s_found);
      else
        atomicMin(&rw.found[sel], s_found);
    }
    return;
  }
  unsigned long long* my_measure = private_hist + warp * kDigits;
  unsigned* my_count = reinterpret_cast<unsigned*>(private_hist + kWarps * kDigits) + warp * kDigits;
  for (int d = lane; d < kDigits; d += 32) {
    my_measure[d] = 0;
    my_count[d] = 0;
  }
  __syncwarp();
  for_ids<Mass ? 2 : 4, Mass>(x.l, x.w, a.vocab, x.i0, x.i1, [&](int i, float li, double wi, bool ok) {
    const unsigned long long k = rank_key(li, i);
    const unsigned long long q = Mass ? __double2ull_rn(wi * scale) : 1ull;
    const bool in = ok && (k & st.mask) == st.prefix && q > 0;
    const int digit = int(k >> st.shift) & 255;
    const unsigned counted = __ballot_sync(0xffffffffu, in);
    if (!counted) return;
    const int first = __shfl_sync(0xffffffffu, digit, __ffs(counted) - 1);
    if (__all_sync(0xffffffffu, !in || digit == first)) {  // clustered keys: one add for the warp
      unsigned long long sum = in ? q : 0ull;
      if constexpr (Mass)
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      else
        sum = __popc(counted);
      if (lane == 0) {
        atomicAdd(&my_measure[first], sum);
        atomicAdd(&my_count[first], unsigned(__popc(counted)));
      }
    } else if (in) {
      atomicAdd(&my_measure[digit], q);
      atomicAdd(&my_count[digit], 1u);
    }
  });
  __syncthreads();
  const unsigned* counts = reinterpret_cast<const unsigned*>(private_hist + kWarps * kDigits);
  unsigned long long m = 0;
  unsigned c = 0;
  for (int v = 0; v < kWarps; ++v) {
    m += private_hist[v * kDigits + tid];
    c += counts[v * kDigits + tid];
  }
  if (c) {
    atomicAdd(&rw.measure[sel][pass][tid], m);
    atomicAdd(&rw.count[sel][pass][tid], c);
  }
}

// Phase 3: greedy rows get their token (and one-hot probabilities); the others their weights
// exp((logit - max) / T) over the top-k set, and each slice's sum.
__global__ void __launch_bounds__(kThreads) sample_weights_kernel(Args a) {
  __shared__ double red[32];
  const Slice x = slice_of(a);  // before the wait: see slice_of
  pdl_begin();
  const unsigned long long top = row_top(*x.rw, x.L.slices);
  const int top_id = id_of(top);
  if (greedy(x.row, a)) {
    if (x.s == 0 && threadIdx.x == 0) a.tokens[x.r] = top_id;
    if (a.probs)
      for (int i = x.i0 + int(threadIdx.x); i < x.i1; i += kThreads)
        a.probs[size_t(x.r) * a.vocab + i] = i == top_id ? 1.0f : 0.0f;
    return;
  }
  const unsigned long long kth = top_k_on(x.row, a) ? select_answer(*x.rw, 0) : 0ull;
  const float mx = logit_of(top);
  // Products by reciprocals rather than a division per id (within an ulp of the reference's quotients).
  const double inv_temperature = 1.0 / double(x.row.temperature);
  double sum = 0;
  double* w = x.w;
  for_ids<4, false>(x.l, nullptr, a.vocab, x.i0, x.i1, [&](int i, float li, double, bool ok) {
    if (!ok) return;
    const double v = rank_key(li, i) >= kth ? exp(double(li - mx) * inv_temperature) : 0.0;
    w[i] = v;
    sum += v;
  });
  sum = block_sum(sum, red);
  if (threadIdx.x == 0) x.rw->slice_sum[x.s] = sum;
}

// Phase 5 (top-p rows): each slice's weights over the keys at or above the top-p cut.
__global__ void __launch_bounds__(kThreads) sample_sum2_kernel(Args a) {
  __shared__ double red[32];
  const Slice x = slice_of(a);  // before the wait: see slice_of
  pdl_begin();
  if (!top_p_on(x.row, a)) return;
  const unsigned long long thr = select_answer(*x.rw, 1);
  double sum = 0;
  for_ids<2, true>(x.l, x.w, a.vocab, x.i0, x.i1, [&](int i, float li, double wi, bool ok) {
    if (ok && rank_key(li, i) >= thr) sum += wi;
  });
  sum = block_sum(sum, red);
  if (threadIdx.x == 0) x.rw->slice_sum2[x.s] = sum;
}

// The cut and 1 / mass of the set drawn from (the same in the draw and the walk).
struct DrawSet {
  unsigned long long thr;
  double inv_sum;
};
__device__ __forceinline__ DrawSet draw_set(const Slice& x, const Args& a) {
  const bool p = top_p_on(x.row, a);
  const unsigned long long thr = p ? select_answer(*x.rw, 1) : top_k_on(x.row, a) ? select_answer(*x.rw, 0) : 0ull;
  return {thr, 1.0 / slices_sum(p ? x.rw->slice_sum2 : x.rw->slice_sum, x.L.slices)};
}
__device__ __forceinline__ float prob_of(const DrawSet& d, int i, float li, double wi) {
  return rank_key(li, i) >= d.thr ? float(wi * d.inv_sum) : 0.0f;
}

constexpr int kSegBatch = 4;  // segments a warp loads before using any

// Phase 6: the probabilities (written out when asked), and each 128-id segment's mass, first and last id with
// mass.
__global__ void __launch_bounds__(kThreads) sample_draw_kernel(Args a) {
  const Slice x = slice_of(a);  // before the wait: see slice_of
  pdl_begin();
  if (greedy(x.row, a)) return;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  DrawSet d{};
  bool have_set = false;  // draw_set's loads go out after the first segments' (they do not depend on each other)
  const int nseg = (x.i1 - x.i0 + kSegIds - 1) / kSegIds;
  float* probs = a.probs ? a.probs + size_t(x.r) * a.vocab : nullptr;
  Segment* segs = a.seg + size_t(x.r) * x.L.segments + x.i0 / kSegIds;
  for (int g0 = warp; g0 < nseg; g0 += kSegBatch * kWarps) {
    float lv[kSegBatch][4];
    double wv[kSegBatch][4];
#pragma unroll
    for (int b = 0; b < kSegBatch; ++b)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = x.i0 + (g0 + b * kWarps) * kSegIds + 32 * j + lane;
        lv[b][j] = i < x.i1 ? x.l[i] : 0.0f;
        wv[b][j] = i < x.i1 ? x.w[i] : 0.0;
      }
    if (!have_set) {
      d = draw_set(x, a);
      have_set = true;
    }
#pragma unroll
    for (int b = 0; b < kSegBatch; ++b) {
      const int g = g0 + b * kWarps;
      if (g >= nseg) break;
      double acc = 0;
      int first = INT_MAX, last = -1;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = x.i0 + g * kSegIds + 32 * j + lane;
        if (i >= x.i1) continue;
        const float p = prob_of(d, i, lv[b][j], wv[b][j]);
        if (probs) probs[i] = p;
        acc += p;
        if (p > 0.0f) {
          first = min(first, i);
          last = i;
        }
      }
      acc = warp_sum(acc);
      for (int o = 16; o > 0; o >>= 1) {
        first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
        last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
      }
      if (lane == 0) segs[g] = Segment{acc, first, last};
    }
  }
}

// Exclusive prefix sum over the block's threads (kThreads), in a fixed order.
__device__ __forceinline__ double block_exclusive_sum(double v) {
  __shared__ double warp_total[kWarps], warp_start[kWarps];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const double incl = warp_inclusive_sum(v);
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.0;
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const double t = lane < kWarps ? warp_total[lane] : 0.0;
    const double ti = warp_inclusive_sum(t);
    double te = __shfl_up_sync(0xffffffffu, ti, 1);
    if (lane == 0) te = 0.0;
    if (lane < kWarps) warp_start[lane] = te;
  }
  __syncthreads();
  return warp_start[warp] + excl;
}

// Phase 7, one block per row: the segments' starts (a scan of their masses in id order); the last segment with
// mass whose start is at most u is walked id by id. Every later segment with mass offers its first id (its start
// already exceeds u: the answer where rounding left the walk short); the token is the lowest offer, else (u past
// the rounded total) the last id with mass.
__global__ void __launch_bounds__(kThreads) sample_walk_kernel(Args a) {
  __shared__ int s_walker, s_offer, s_last, s_found;
  __shared__ double s_walker_start;
  const Slice x = slice_of(a);  // before the wait: see slice_of
  pdl_begin();
  if (greedy(x.row, a)) return;
  const int tid = int(threadIdx.x), lane = tid & 31;
  const int nseg = x.L.segments, per = (nseg + kThreads - 1) / kThreads;
  const int g0 = min(nseg, tid * per), g1 = min(nseg, g0 + per);
  const Segment* segs = a.seg + size_t(x.r) * nseg;
  if (tid == 0) {
    s_walker = -1;
    s_offer = INT_MAX;
    s_last = -1;
    s_found = INT_MAX;
  }
  double local = 0;
  for (int g = g0; g < g1; ++g) local += segs[g].mass;
  const double start = block_exclusive_sum(local);  // also orders the initialisation above
  const double u = x.row.u;
  double run = start;
  int walker = -1, last = -1;
  double walker_start = 0;
  for (int g = g0; g < g1; ++g) {
    const Segment sg = segs[g];
    if (sg.last >= 0) {
      if (run <= u) {
        walker = g;
        walker_start = run;
      }
      last = sg.last;
    }
    run += sg.mass;
  }
  if (walker >= 0) atomicMax(&s_walker, walker);
  if (last >= 0) atomicMax(&s_last, last);
  __syncthreads();
  if (walker >= 0 && walker == s_walker) s_walker_start = walker_start;
  int offer = INT_MAX;
  for (int g = max(g0, s_walker + 1); g < g1; ++g) {
    const Segment sg = segs[g];
    if (sg.last >= 0) {
      offer = sg.first;
      break;
    }
  }
  if (offer != INT_MAX) atomicMin(&s_offer, offer);
  __syncthreads();
  if (tid < 32 && s_walker >= 0) {
    const DrawSet d = draw_set(x, a);
    double r = s_walker_start;
    float lv[4];
    double wv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = s_walker * kSegIds + 32 * j + lane;
      lv[j] = i < a.vocab ? x.l[i] : 0.0f;
      wv[j] = i < a.vocab ? x.w[i] : 0.0;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = s_walker * kSegIds + 32 * j + lane;
      const float p = i < a.vocab ? prob_of(d, i, lv[j], wv[j]) : 0.0f;
      const double incl = warp_inclusive_sum(double(p));
      const unsigned hit = __ballot_sync(0xffffffffu, p > 0.0f && u < r + incl);
      if (hit) {
        if (lane == 0) s_found = s_walker * kSegIds + 32 * j + __ffs(hit) - 1;
        break;
      }
      r += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  __syncthreads();
  if (tid == 0) {
    const int token = min(s_found, s_offer);
    a.tokens[x.r] = token != INT_MAX ? token : s_last;
  }
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

SampleSteps sample_steps(const SampleRow* rows, size_t n) {
  SampleSteps s{false, false, false};
  for (size_t i = 0; i < n; ++i) {
    const SampleRow& r = rows[i];
    if (r.temperature <= 0.0f) continue;
    s.draw = true;
    s.top_k = s.top_k || r.top_k > 0;
    s.top_p = s.top_p || r.top_p < 1.0f;
  }
  return s;
}

size_t sample_work_bytes(int rows, int vocab) {
  const Layout L = layout_of(vocab);
  return align_up(size_t(rows) * vocab * sizeof(double)) + align_up(size_t(rows) * sizeof(RowWork)) +
         size_t(rows) * L.segments * sizeof(Segment);
}

cudaError_t sample_rows(const float* logits, int rows, int vocab, const SampleRow* params, int* tokens, float* probs,
                        void* work, cudaStream_t stream, SampleSteps steps) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0 || rows < 0 || rows > 65535) return cudaErrorInvalidValue;
  const Layout L = layout_of(vocab);
  char* base = static_cast<char*>(work);
  Args a;
  a.logits = logits;
  a.vocab = vocab;
  a.rows = params;
  a.tokens = tokens;
  a.probs = probs;
  a.w = reinterpret_cast<double*>(base);
  a.rw = reinterpret_cast<RowWork*>(base + align_up(size_t(rows) * vocab * sizeof(double)));
  a.seg = reinterpret_cast<Segment*>(base + align_up(size_t(rows) * vocab * sizeof(double)) +
                                     align_up(size_t(rows) * sizeof(RowWork)));
  a.steps = (steps.top_k ? kStepTopK : 0) | (steps.top_p ? kStepTopP : 0) | (steps.draw ? kStepDraw : 0);
  const dim3 grid(L.slices, rows), block(kThreads);
  cudaError_t e = dev::launch(sample_max_kernel, grid, block, 0, stream, a);
  for (int p = 0; e == cudaSuccess && steps.draw && steps.top_k && p <= kPasses; ++p)
    e = dev::launch(sample_select_kernel<false>, grid, block, kPrivateHistBytes, stream, a, p);
  if (e == cudaSuccess) e = dev::launch(sample_weights_kernel, grid, block, 0, stream, a);
  if (steps.draw) {
    for (int p = 0; e == cudaSuccess && steps.top_p && p <= kPasses; ++p)
      e = dev::launch(sample_select_kernel<true>, grid, block, kPrivateHistBytes, stream, a, p);
    if (e == cudaSuccess && steps.top_p) e = dev::launch(sample_sum2_kernel, grid, block, 0, stream, a);
    if (e == cudaSuccess) e = dev::launch(sample_draw_kernel, grid, block, 0, stream, a);
    if (e == cudaSuccess) e = dev::launch(sample_walk_kernel, dim3(1, rows), block, 0, stream, a);
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace moeserve::cuda
