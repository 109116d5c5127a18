// Next-token sampling on the GPU (kernels/cuda/ops.h sample_rows; reference engine/sampler.cpp): one block per
// row, each row with its own settings. Ranks are composite 64-bit keys (logit order, then lower id first), so
// top-k is a radix select on the keys by count and top-p one by probability mass; the token is the first id (id
// order) whose cumulative probability exceeds u, as the reference draws it.
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ unsigned long long rank_key(float logit, int id) {
  const uint32_t u = __float_as_uint(logit);
  const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(k) << 32) | static_cast<unsigned long long>(0xffffffffu - uint32_t(id));
}

// A pass over a row: f(i, logit, weight, valid) for each of this thread's ids (weight 0 unless Weights). Every
// thread of the block runs the same trip count, so f may use warp collectives. One block reads the whole row
// (517 KB of logits at V4's vocab, 1 MB of weights) several times, so each thread issues Batch loads before using
// any (a rolled one-id loop waited a memory round trip per id), 16-byte vectors where the row allows.
template <int Batch, bool Weights, class F>
__device__ __forceinline__ void for_ids(const float* l, const double* w, int vocab, F&& f) {
  const int step = int(blockDim.x), tid = int(threadIdx.x);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(l) | (Weights ? reinterpret_cast<uintptr_t>(w) : 0);
  if (vocab % 4 == 0 && addr % 16 == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const double2* w2 = reinterpret_cast<const double2*>(w);
    const int n4 = vocab / 4;
    for (int base = 0; base < n4; base += Batch * step) {
      float4 v[Batch];
      double2 a[Weights ? Batch : 1], b[Weights ? Batch : 1];
#pragma unroll
      for (int j = 0; j < Batch; ++j) {
        const int q = base + j * step + tid;
        v[j] = q < n4 ? l4[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if constexpr (Weights) {
          a[j] = q < n4 ? w2[2 * q] : make_double2(0.0, 0.0);
          b[j] = q < n4 ? w2[2 * q + 1] : make_double2(0.0, 0.0);
        }
      }
#pragma unroll
      for (int j = 0; j < Batch; ++j) {
        const int q = base + j * step + tid;
        const bool ok = q < n4;
        f(4 * q, v[j].x, Weights ? a[j].x : 0.0, ok);
        f(4 * q + 1, v[j].y, Weights ? a[j].y : 0.0, ok);
        f(4 * q + 2, v[j].z, Weights ? b[j].x : 0.0, ok);
        f(4 * q + 3, v[j].w, Weights ? b[j].y : 0.0, ok);
      }
    }
    return;
  }
  for (int base = 0; base < vocab; base += 4 * Batch * step) {
    float v[4 * Batch];
    double x[Weights ? 4 * Batch : 1];
#pragma unroll
    for (int j = 0; j < 4 * Batch; ++j) {
      const int i = base + j * step + tid;
      v[j] = i < vocab ? l[i] : 0.0f;
      if constexpr (Weights) x[j] = i < vocab ? w[i] : 0.0;
    }
#pragma unroll
    for (int j = 0; j < 4 * Batch; ++j) {
      const int i = base + j * step + tid;
      f(i, v[j], Weights ? x[j] : 0.0, i < vocab);
    }
  }
}

struct SelectShared {
  unsigned long long measure[256];  // per digit: the counted keys (count, or mass)
  int count[256];                   // per digit: the counted keys
  unsigned long long prefix, remaining;
  int single;
};
// Each warp's own histogram (dynamic shared memory). Keys cluster in a few digits (logits share their top exponent
// bits): with one histogram for the block, 32 warps' atomics on the same few words serialised each pass (top-p
// of T 0.7 / 0.95 over 129280 uniform logits: 2432 us; 431 us with these). A warp's lanes adding one digit at a
// time (ballot + reduce per digit, no atomics) took 667 us.
constexpr size_t kPrivateHistBytes = size_t(kWarps) * 256 * (sizeof(unsigned long long) + sizeof(int));

// Radix select, 8 bits a pass from the top: the largest key t such that the keys >= t reach `need`, each key
// counting 1 (top-k: t is the need-th largest key) or, under Mass, its weight as 60-bit fixed point (weight *
// scale, rounded: integer sums are exact in any order, so the histogram is deterministic; keys of no mass are
// left out, and they are the lowest: under the top-k cut, or underflowed). Once the chosen digit holds no more
// keys than are still wanted (under Mass: one key), the answer is its lowest (only) key: one pass finds it
// instead of one per remaining digit.
template <bool Mass>
__device__ unsigned long long radix_select(const float* l, const double* w, int vocab, double scale,
                                           unsigned long long need, SelectShared& s) {
  extern __shared__ unsigned long long private_hist[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  unsigned long long* my_measure = private_hist + warp * 256;
  int* const counts = reinterpret_cast<int*>(private_hist + warps * 256);
  int* my_count = counts + warp * 256;
  unsigned long long prefix = 0, mask = 0, remaining = need;
  bool single = false;
  for (int shift = 56; shift >= 0 && !single; shift -= 8) {
    for (int d = lane; d < 256; d += 32) {
      my_measure[d] = 0;
      my_count[d] = 0;
    }
    __syncwarp();
    for_ids<Mass ? 2 : 4, Mass>(l, w, vocab, [&](int i, float li, double wi, bool ok) {
      const unsigned long long k = rank_key(li, i);
      const unsigned long long q = Mass ? __double2ull_rn(wi * scale) : 1ull;
      const bool in = ok && (k & mask) == prefix && q > 0;
      const int digit = int(k >> shift) & 255;
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
          atomicAdd(&my_count[first], __popc(counted));
        }
      } else if (in) {
        atomicAdd(&my_measure[digit], q);
        atomicAdd(&my_count[digit], 1);
      }
    });
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += blockDim.x) {
      unsigned long long m = 0;
      int c = 0;
      for (int v = 0; v < warps; ++v) {
        m += private_hist[v * 256 + d];
        c += counts[v * 256 + d];
      }
      s.measure[d] = m;
      s.count[d] = c;
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // lane l owns digits 255 - 8l ... 248 - 8l; a scan from the top finds the digit
      unsigned long long local = 0;
      for (int u = 0; u < 8; ++u) local += s.measure[255 - (lane * 8 + u)];
      const unsigned long long incl = warp_inclusive_sum(local);
      // The keys matching the prefix always reach `remaining` (top-k < vocab; top-p's need is at most
      // (1 - 2^-24) 2^60, the masses sum to 2^60 within rounding), so some lane hits.
      const unsigned hit = __ballot_sync(0xffffffffu, incl >= remaining);
      if (lane == __ffs(hit) - 1) {
        unsigned long long cum = incl - local;
        int digit = 0;
        for (int u = 0; u < 8; ++u) {
          const int dg = 255 - (lane * 8 + u);
          if (cum + s.measure[dg] >= remaining) {
            digit = dg;
            break;
          }
          cum += s.measure[dg];
        }
        s.remaining = remaining - cum;
        s.prefix = prefix | (static_cast<unsigned long long>(digit) << shift);
        s.single = Mass ? s.count[digit] == 1 : static_cast<unsigned long long>(s.count[digit]) == remaining - cum;
      }
    }
    __syncthreads();
    prefix = s.prefix;
    remaining = s.remaining;
    single = s.single;
    mask |= 255ull << shift;
    __syncthreads();
  }
  if (single && mask != ~0ull) {
    if (threadIdx.x == 0) s.prefix = Mass ? 0ull : ~0ull;
    __syncthreads();
    for_ids<Mass ? 2 : 4, Mass>(l, w, vocab, [&](int i, float li, double wi, bool ok) {
      const unsigned long long k = rank_key(li, i);
      if (!ok || (k & mask) != prefix) return;
      if constexpr (Mass) {
        if (__double2ull_rn(wi * scale) > 0) atomicMax(&s.prefix, k);
      } else {
        atomicMin(&s.prefix, k);
      }
    });
    __syncthreads();
    prefix = s.prefix;
    __syncthreads();
  }
  return prefix;
}

constexpr int kWalk = 8;  // ids a lane loads before using any in the draw's passes

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int vocab, const SampleRow* rows,
                                                          int* tokens, float* probs_out, double* work) {
  dev::pdl_begin();
  __shared__ SelectShared sel;
  __shared__ unsigned long long s_best[kWarps];
  __shared__ double red[32];
  __shared__ double s_sum[kWarps], s_start[kWarps];
  __shared__ int s_first[kWarps], s_last[kWarps];
  __shared__ int s_token, s_last_all, s_walker;
  const int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const SampleRow row = rows[r];
  const float* l = logits + size_t(r) * vocab;
  float* probs = probs_out ? probs_out + size_t(r) * vocab : nullptr;
  double* w = work + size_t(r) * vocab;
  // Greedy / the top key: argmax with ties to the lowest id.
  unsigned long long best = 0;
  for_ids<4, false>(l, nullptr, vocab, [&](int i, float li, double, bool ok) {
    const unsigned long long k = ok ? rank_key(li, i) : 0ull;
    best = k > best ? k : best;
  });
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long v = __shfl_xor_sync(0xffffffffu, best, o);
    best = v > best ? v : best;
  }
  if (lane == 0) s_best[warp] = best;
  __syncthreads();
  for (int i = 0; i < kWarps; ++i) best = s_best[i] > best ? s_best[i] : best;
  const int top_id = int(0xffffffffu - uint32_t(best & 0xffffffffu));
  if (row.temperature <= 0.0f) {
    if (threadIdx.x == 0) tokens[r] = top_id;
    if (probs)
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) probs[i] = i == top_id ? 1.0f : 0.0f;
    return;
  }
  const unsigned long long kth =
      row.top_k > 0 && row.top_k < vocab
          ? radix_select<false>(l, nullptr, vocab, 0.0, static_cast<unsigned long long>(row.top_k), sel)
          : 0ull;
  const float mx = l[top_id];
  // Products by reciprocals rather than a division per id (within an ulp of the reference's quotients).
  const double inv_temperature = 1.0 / double(row.temperature);
  double sum = 0;
  for_ids<4, false>(l, nullptr, vocab, [&](int i, float li, double, bool ok) {
    if (!ok) return;
    const double v = rank_key(li, i) >= kth ? exp(double(li - mx) * inv_temperature) : 0.0;
    w[i] = v;
    sum += v;
  });
  sum = block_sum(sum, red);
  // top-p: the largest key whose keys at or above it reach top_p of the mass (top_p * 2^60 is an exact integer).
  const unsigned long long thr =
      row.top_p < 1.0f
          ? radix_select<true>(l, w, vocab, 0x1p60 / sum, static_cast<unsigned long long>(double(row.top_p) * 0x1p60),
                               sel)
          : kth;
  double sum2 = 0;
  for_ids<2, true>(l, w, vocab, [&](int i, float li, double wi, bool ok) {
    if (ok && rank_key(li, i) >= thr) sum2 += wi;
  });
  sum2 = block_sum(sum2, red);
  const double inv_sum2 = 1.0 / sum2;
  // The draw. Warp v owns ids [v seg, (v + 1) seg): each warp sums its probabilities (and writes them out), a scan
  // of the 32 sums gives each segment's start, and the last warp whose start is at most u walks its segment
  // in id order. Every later warp with mass offers its first id (its start already exceeds u: the answer where
  // rounding left the walk short); the token is the lowest offer, else (u past the rounded total) the last id
  // with mass.
  const int seg = ((vocab + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int s0 = min(vocab, warp * seg), s1 = min(vocab, s0 + seg);
  auto prob = [&](int i, float li, double wi) { return rank_key(li, i) >= thr ? float(wi * inv_sum2) : 0.0f; };
  // This lane's logits and weights of the kWalk groups of 32 ids from c (both passes over the segment).
  auto load_walk = [&](int c, float (&lv)[kWalk], double (&wv)[kWalk]) {
#pragma unroll
    for (int j = 0; j < kWalk; ++j) {
      const int i = c + 32 * j + lane;
      lv[j] = i < s1 ? l[i] : 0.0f;
      wv[j] = i < s1 ? w[i] : 0.0;
    }
  };
  double acc = 0;
  int first = INT_MAX, last = -1;
  for (int c = s0; c < s1; c += 32 * kWalk) {
    float lv[kWalk];
    double wv[kWalk];
    load_walk(c, lv, wv);
#pragma unroll
    for (int j = 0; j < kWalk; ++j) {
      const int i = c + 32 * j + lane;
      if (i >= s1) continue;
      const float p = prob(i, lv[j], wv[j]);
      if (probs) probs[i] = p;
      acc += p;
      if (p > 0.0f) {
        first = min(first, i);
        last = i;
      }
    }
  }
  acc = warp_sum(acc);
  for (int o = 16; o > 0; o >>= 1) {
    first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
    last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
  }
  if (lane == 0) {
    s_sum[warp] = acc;
    s_first[warp] = first;
    s_last[warp] = last;
  }
  __syncthreads();
  const double ur = row.u;
  if (warp == 0) {
    const double incl = warp_inclusive_sum(s_sum[lane]);
    double start = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) start = 0.0;
    s_start[lane] = start;
    const bool has_mass = s_last[lane] >= 0;
    const unsigned below = __ballot_sync(0xffffffffu, has_mass && start <= ur);
    const int walker = below ? 31 - __clz(below) : -1;
    int offer = has_mass && lane > walker ? s_first[lane] : INT_MAX;
    int last_all = s_last[lane];
    for (int o = 16; o > 0; o >>= 1) {
      offer = min(offer, __shfl_xor_sync(0xffffffffu, offer, o));
      last_all = max(last_all, __shfl_xor_sync(0xffffffffu, last_all, o));
    }
    if (lane == 0) {
      s_walker = walker;
      s_token = offer;
      s_last_all = last_all;
    }
  }
  __syncthreads();
  if (warp == s_walker) {
    double run = s_start[warp];
    int found = INT_MAX;
    for (int c = s0; c < s1 && found == INT_MAX; c += 32 * kWalk) {
      float lv[kWalk];
      double wv[kWalk];
      load_walk(c, lv, wv);
#pragma unroll
      for (int j = 0; j < kWalk; ++j) {
        const int i = c + 32 * j + lane;
        const float p = i < s1 ? prob(i, lv[j], wv[j]) : 0.0f;
        const double incl = warp_inclusive_sum(double(p));
        const unsigned hit = __ballot_sync(0xffffffffu, p > 0.0f && ur < run + incl);
        if (hit) {
          found = c + 32 * j + __ffs(hit) - 1;
          break;
        }
        run += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
    if (lane == 0 && found < s_token) s_token = found;
  }
  __syncthreads();
  if (threadIdx.x == 0) tokens[r] = s_token != INT_MAX ? s_token : s_last_all;
}

}  // namespace

size_t sample_work_bytes(int rows, int vocab) { return size_t(rows) * vocab * sizeof(double); }

cudaError_t sample_rows(const float* logits, int rows, int vocab, const SampleRow* params, int* tokens, float* probs,
                        void* work, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0) return cudaErrorInvalidValue;
  static const cudaError_t configured = cudaFuncSetAttribute(
      sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPrivateHistBytes));
  if (configured != cudaSuccess) return configured;
  dev::launch(sample_kernel, dim3(rows), dim3(kThreads), kPrivateHistBytes, stream, logits, vocab, params, tokens,
              probs, static_cast<double*>(work));
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
