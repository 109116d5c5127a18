// Elementwise and row-wise ops of the forward (kernels/cuda/ops.h): embedding, RMSNorm, RoPE (with the fused
// per-head norm of q), the quantization simulations, the FP8 activation quantizer, ape, SwiGLU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma_sync_bf16.cuh"
#include "kernels/cuda/ops.h"

#include <algorithm>

namespace moeserve::cuda {

namespace {

using namespace dev;

// Row copies below load kCopyBatch elements per thread before storing any: one block per row is the whole
// kernel at one decode token, and a load-store-load chain would pay one memory latency per element.
constexpr int kCopyBatch = 8;

template <class T>
__global__ void embed_kernel(const T* table, int D, const int* ids, int hc, float* h) {
  dev::pdl_begin();
  const int t = blockIdx.x;
  const T* row = table + size_t(ids[t]) * D;
  float* out = h + size_t(t) * hc * D;
  for (int d0 = threadIdx.x; d0 < D; d0 += kCopyBatch * blockDim.x) {
    float v[kCopyBatch];
#pragma unroll
    for (int i = 0; i < kCopyBatch; ++i) {
      const int d = d0 + i * blockDim.x;
      if constexpr (sizeof(T) == 2) v[i] = d < D ? bf16_value(row[d]) : 0.0f;
      else v[i] = d < D ? row[d] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kCopyBatch; ++i) {
      const int d = d0 + i * blockDim.x;
      if (d < D)
        for (int j = 0; j < hc; ++j) out[size_t(j) * D + d] = v[i];
    }
  }
}

// One block per row; sum of squares in double (the reference accumulates in double).
// x is read in batches of kNormHeld values per thread, all loads of a batch before their sum: a decode step's
// q_norm is one block on the critical path, and a rolled loop of loads is one memory round trip per value a
// thread holds. Rows of up to one batch (the launch sizes the block for that up to 4096 values) stay in registers
// for the output; the weights of such rows load before pdl_wait. Four values a thread keep the registers low
// enough for two 1024-thread blocks per SM (a prefill's rows: 16 held values took 74 registers and halved the
// 4096-token norm's bandwidth).
constexpr int kNormHeld = 4;
constexpr int kNormMaxThreads = 1024;
__global__ void __launch_bounds__(kNormMaxThreads)
    rms_norm_kernel(const float* x, int dim, int ldx, const float* w, float eps, float* out, int ldo) {
  const int batch = kNormHeld * int(blockDim.x);
  const bool held = dim <= batch;
  float wv[kNormHeld];
#pragma unroll
  for (int u = 0; u < kNormHeld; ++u) {
    const int i = threadIdx.x + u * blockDim.x;
    wv[u] = w && held && i < dim ? w[i] : 1.0f;
  }
  dev::pdl_begin();
  __shared__ double red[32];
  const float* xr = x + size_t(blockIdx.x) * ldx;
  float* o = out + size_t(blockIdx.x) * ldo;
  double sum = 0;
  float xv[kNormHeld];
  for (int b = 0; b < dim; b += batch) {  // the additions of a strided loop over i, in its order
#pragma unroll
    for (int u = 0; u < kNormHeld; ++u) {
      const int i = b + threadIdx.x + u * blockDim.x;
      xv[u] = i < dim ? xr[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kNormHeld; ++u)
      if (b + threadIdx.x + u * blockDim.x < dim) sum += double(xv[u]) * double(xv[u]);
  }
  sum = block_sum(sum, red);
  const float s = float(1.0 / sqrt(sum / double(dim) + double(eps)));
  if (held) {
#pragma unroll
    for (int u = 0; u < kNormHeld; ++u) {
      const int i = threadIdx.x + u * blockDim.x;
      if (i < dim) o[i] = w ? xv[u] * s * wv[u] : xv[u] * s;
    }
    return;
  }
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = w ? xr[i] * s * w[i] : xr[i] * s;
}

// One rotated pair: (a c - b s, b c + a s), each product and sum rounded on its own (as the reference, and the
// same in every kernel here: contracting either into an FMA is a choice the compiler makes per call site).
__device__ __forceinline__ void rotate_pair(float* r, float c, float s) {
  const float a = r[0], b = r[1];
  r[0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  r[1] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// Values per lane of a row that rope_kernel's norm path holds in registers (rows up to 32 * kRopeHeld).
constexpr int kRopeHeld = 16;
constexpr int kRopePairs = 2;  // rotated pairs per lane whose cos/sin rope_kernel computes before pdl_wait

// One warp per (token, head): optional unweighted RMSNorm of the head, then the rotation of its trailing dims.
__global__ void rope_kernel(float* x, int T, int heads, int head_dim, int ld, int rope_dim, const int* pos,
                            const float* inv_freq, float attn_scale, bool inverse, float norm_eps,
                            const float* norm_w) {
  const int lane = threadIdx.x & 31;
  // The norm weights of a held row before pdl_wait (weights: not written by the previous kernel), so that the
  // norm does not wait on a second memory round trip.
  float nw[kRopeHeld];
  const bool nw_held = norm_eps > 0.0f && norm_w && head_dim <= 32 * kRopeHeld;
  if (nw_held)
#pragma unroll
    for (int u = 0; u < kRopeHeld; ++u) nw[u] = lane + 32 * u < head_dim ? norm_w[lane + 32 * u] : 0.0f;
  const int half = rope_dim / 2;
  // The rotation's double-precision cos/sin depend on the position only, which the host writes, and a constant
  // table: all before pdl_wait (up to kRopePairs pairs per lane, the rest in the loop below), so that after it
  // the row's loads come first.
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const bool active = row < T * heads;
  const int t = active ? row / heads : 0, h = active ? row % heads : 0;
  const float p = active ? float(pos[t]) : 0.0f;
  float rc[kRopePairs], rs[kRopePairs];
#pragma unroll
  for (int j = 0; j < kRopePairs; ++j) {
    const int i = lane + 32 * j;
    if (active && i < half) rope_cos_sin(p, inv_freq[i], attn_scale, inverse, &rc[j], &rs[j]);
  }
  dev::pdl_begin();
  if (!active) return;
  float* v = x + size_t(t) * ld + size_t(h) * head_dim;
  if (norm_eps > 0.0f) {
    // Rows up to 32 * kHeld values are held in registers, all loaded before the sum (one memory latency);
    // the sum is in the same order either way.
    constexpr int kHeld = kRopeHeld;
    double sum = 0;
    float held[kHeld];
    const bool in_regs = head_dim <= 32 * kHeld;
    if (in_regs) {
#pragma unroll
      for (int u = 0; u < kHeld; ++u) held[u] = lane + 32 * u < head_dim ? v[lane + 32 * u] : 0.0f;
#pragma unroll
      for (int u = 0; u < kHeld; ++u)
        if (lane + 32 * u < head_dim) sum += double(held[u]) * double(held[u]);
    } else {
      for (int i = lane; i < head_dim; i += 32) sum += double(v[i]) * double(v[i]);
    }
    sum = warp_sum(sum);
    const float s = float(1.0 / sqrt(sum / double(head_dim) + double(norm_eps)));
    if (in_regs) {
#pragma unroll
      for (int u = 0; u < kHeld; ++u) {
        const int i = lane + 32 * u;
        if (i < head_dim) held[u] = norm_w ? held[u] * s * nw[u] : held[u] * s;
      }
#pragma unroll
      for (int u = 0; u < kHeld; ++u)
        if (lane + 32 * u < head_dim) v[lane + 32 * u] = held[u];
    } else {
      for (int i = lane; i < head_dim; i += 32) v[i] = norm_w ? v[i] * s * norm_w[i] : v[i] * s;
    }
    __syncwarp();
  }
  float* r = v + (head_dim - rope_dim);
#pragma unroll
  for (int j = 0; j < kRopePairs; ++j) {
    const int i = lane + 32 * j;
    if (i < half) rotate_pair(r + 2 * i, rc[j], rs[j]);
  }
  for (int i = lane + 32 * kRopePairs; i < half; i += 32) {
    float c, s;
    rope_cos_sin(p, inv_freq[i], attn_scale, inverse, &c, &s);
    rotate_pair(r + 2 * i, c, s);
  }
}

// The indexer's queries (head_dim 128): the rope of the trailing rope_dim values, then the Walsh-Hadamard rotation
// and (FP4) the FP4 simulation per 32, one warp per (token, head) with the row in registers (lane holds values lane
// + 32 u). The positions (written by the host) and so the cos/sin come before pdl_wait; after it the row is loaded
// once, a rotated pair's other value comes from the neighbouring lane, and the row is written once (rope_kernel
// then wrote and re-read it: two more memory round trips on a C4 layer's indexer path). Bit for bit rope_kernel then
// hadamard_fp4_sim: the same operations on the same values in the same order.
template <bool FP4>
__global__ void rope_hadamard_kernel(float* x, int T, int heads, int ld, int rope_dim, const int* pos,
                                     const float* inv_freq, float attn_scale) {
  constexpr int kDim = 128;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const bool active = row < T * heads;
  const int t = active ? row / heads : 0, h = active ? row % heads : 0;
  const int first = kDim - rope_dim;  // even: a pair's values are lanes 2i, 2i + 1 of one u
  float c[4] = {}, s[4] = {};
  if (active) {
    const float p = float(pos[t]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = lane + 32 * u;
      if (j >= first) rope_cos_sin(p, inv_freq[(j - first) >> 1], attn_scale, false, &c[u], &s[u]);
    }
  }
  dev::pdl_begin();
  if (!active) return;
  float* v = x + size_t(t) * ld + size_t(h) * kDim;
  float e[4];  // element lane + 32 u
#pragma unroll
  for (int u = 0; u < 4; ++u) e[u] = v[lane + 32 * u];
  // rotate_pair's arithmetic: (a c - b s, b c + a s) for the pair (a, b) = (even, odd) element.
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const float other = __shfl_xor_sync(0xffffffffu, e[u], 1);
    if (lane + 32 * u >= first)
      e[u] = (lane & 1) == 0 ? __fsub_rn(__fmul_rn(e[u], c[u]), __fmul_rn(other, s[u]))
                             : __fadd_rn(__fmul_rn(e[u], c[u]), __fmul_rn(other, s[u]));
  }
  // Butterflies of hadamard_shared: stage len pairs (i, i + len), i without bit len: a + b at i, a - b at i + len.
#pragma unroll
  for (int len = 1; len < 32; len <<= 1) {
    const bool low = (lane & len) == 0;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float other = __shfl_xor_sync(0xffffffffu, e[u], len);
      e[u] = low ? e[u] + other : other - e[u];
    }
  }
#pragma unroll
  for (int len = 1; len < 4; len <<= 1)  // len 32 and 64: partners in the same lane
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if ((u & len) == 0) {
        const float a = e[u], b = e[u + len];
        e[u] = a + b;
        e[u + len] = a - b;
      }
  const float norm = 1.0f / sqrtf(128.0f);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    e[u] *= norm;
    if constexpr (FP4) {
      e[u] = fp4_block_sim_lane(e[u]);
    }
    v[lane + 32 * u] = e[u];
  }
}

// rope() with the FP8 storage simulation (fp8_block > 0; the KV head): one block of 256 threads per row, so that
// the norm's sum (warp 0, rope_kernel's order), the rotation's double-precision cos/sin (warp 1, before pdl_wait)
// and then the simulation's blocks (one warp each) and the rotation run side by side. One warp doing all of it in
// turn was ~10 us of a batch-1 layer's critical path. head_dim <= 512 (two values per thread), fp8_block % 32 == 0.
__global__ void __launch_bounds__(256) rope_norm_fp8_kernel(float* x, int heads, int head_dim, int ld, int rope_dim,
                                                            const int* pos, const float* inv_freq, float attn_scale,
                                                            bool inverse, float norm_eps, const float* norm_w,
                                                            int fp8_block) {
  constexpr int kThreads = 256;
  __shared__ float row[2 * kThreads];
  __shared__ float cs[2][kThreads];  // cos, sin of each rotated pair (rope_dim <= head_dim <= 512)
  __shared__ float scale;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float nw[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int i = threadIdx.x + kThreads * u;
    nw[u] = norm_w && i < head_dim ? norm_w[i] : 1.0f;
  }
  const int half = rope_dim / 2;
  const int t = blockIdx.x / heads, h = blockIdx.x % heads;
  // Warp 1: the rotation's double-precision cos/sin, from the host-written position and a constant table, so also
  // before pdl_wait (the __syncthreads below publishes them).
  if (warp == 1) {
    const float p = float(pos[t]);
    for (int i = lane; i < half; i += 32) rope_cos_sin(p, inv_freq[i], attn_scale, inverse, &cs[0][i], &cs[1][i]);
  }
  dev::pdl_begin();
  float* v = x + size_t(t) * ld + size_t(h) * head_dim;
  float val[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int i = threadIdx.x + kThreads * u;
    val[u] = i < head_dim ? v[i] : 0.0f;
  }
  if (warp == 0) {  // the sum of squares in rope_kernel's order: lane-strided in double, then the warp's tree
    // All of the lane's values loaded before the sum (head_dim <= 512: 16 a lane), not one round trip each.
    float held[2 * kThreads / 32];
#pragma unroll
    for (int u = 0; u < 2 * kThreads / 32; ++u) held[u] = lane + 32 * u < head_dim ? v[lane + 32 * u] : 0.0f;
    double sum = 0;
#pragma unroll
    for (int u = 0; u < 2 * kThreads / 32; ++u)
      if (lane + 32 * u < head_dim) sum += double(held[u]) * double(held[u]);
    sum = warp_sum(sum);
    if (lane == 0) scale = float(1.0 / sqrt(sum / double(head_dim) + double(norm_eps)));
  }
  __syncthreads();
  const float s = scale;
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int i = threadIdx.x + kThreads * u;
    if (i < head_dim) row[i] = norm_w ? val[u] * s * nw[u] : val[u] * s;
  }
  __syncthreads();
  // fp8_block_sim's arithmetic on each block of the first head_dim - rope_dim values (a trailing partial block
  // its own), and the rotation of the rest: disjoint values.
  const int width = head_dim - rope_dim;
  for (int b0 = warp * fp8_block; b0 < width; b0 += 8 * fp8_block)
    fp8_block_sim_warp(row + b0, row + b0, min(width, b0 + fp8_block) - b0, lane);
  for (int i = threadIdx.x; i < half; i += kThreads) rotate_pair(row + width + 2 * i, cs[0][i], cs[1][i]);
  __syncthreads();
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int i = threadIdx.x + kThreads * u;
    if (i < head_dim) v[i] = row[i];
  }
}

// One warp per (row, block).
__global__ void fp8_block_sim_kernel(const float* x, int ldx, float* y, int ldy, int rows, int width, int block) {
  dev::pdl_begin();
  const int blocks = (width + block - 1) / block;
  const int item = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (item >= rows * blocks) return;
  const int r = item / blocks, b = item % blocks;
  const float* v = x + size_t(r) * ldx + size_t(b) * block;
  float* out = y + size_t(r) * ldy + size_t(b) * block;
  fp8_block_sim_warp(v, out, min(width, (b + 1) * block) - b * block, lane);
}

// One block (128 threads) per row.
__global__ void hadamard_fp4_kernel(float* x, int dim, bool fp4) {
  dev::pdl_begin();
  extern __shared__ float sv[];
  float* v = x + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) sv[i] = v[i];
  __syncthreads();
  dev::hadamard_shared(sv, dim);
  if (fp4) {  // one warp per 32-block
    const int lane = threadIdx.x & 31;
    for (int b = threadIdx.x / 32; b < dim / 32; b += blockDim.x / 32) {
      sv[b * 32 + lane] = fp4_block_sim_lane(sv[b * 32 + lane]);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < dim; i += blockDim.x) v[i] = sv[i];
}

// One warp per (row, 128-block).
__global__ void act_quant_kernel(const float* x, int M, int K, int ldx, uint8_t* q, float* scales) {
  dev::pdl_begin();
  const int kb_count = K / 128;
  const int item = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (item >= M * kb_count) return;
  const int m = item / kb_count, kb = item % kb_count;
  const float4 v = *reinterpret_cast<const float4*>(x + size_t(m) * ldx + kb * 128 + lane * 4);
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  amax = warp_absmax(amax);
  const float s = pow2_scale(amax, kFp8Max, kFp8AmaxFloor);
  // s is a power of two: v * (1 / s) is v / s exactly (fp8_round4's reasoning), with no division and none of the
  // slow paths a division takes on tiny or subnormal values.
  const float inv = pow2_reciprocal(s);
  const uint32_t lo = fp8x2_bits(v.x * inv, v.y * inv), hi = fp8x2_bits(v.z * inv, v.w * inv);
  *reinterpret_cast<uint32_t*>(q + size_t(m) * K + kb * 128 + lane * 4) = lo | hi << 16;
  if (lane == 0) scales[size_t(kb) * M + m] = s;
}

__global__ void to_bf16_kernel(const float* x, int M, int K, int ldx, uint16_t* out) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(M) * K) return;
  const int m = int(i / K), k = int(i % K);
  __nv_bfloat16 b = __float2bfloat16_rn(x[size_t(m) * ldx + k]);
  out[i] = *reinterpret_cast<uint16_t*>(&b);
}

// The same, 8 weights a thread (K % 8 == 0, w 8- and out 16-byte aligned: one load and one store each; a byte a
// thread took 159 us on a V4-Flash wo_a, 33.5 MB in, against ~24 us of bandwidth). The 8 share one 128-block scale.
__global__ void fp8_weights_to_bf16_x8_kernel(const uint8_t* w, const float* row_scale, int N, int K, int scale_ld,
                                              int shift, uint16_t* out) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x, per_row = size_t(K) / 8;
  if (i >= size_t(N) * per_row) return;
  const int n = int(i / per_row), k = int(i % per_row) * 8;
  const uint2 codes = reinterpret_cast<const uint2*>(w)[i];
  const float sc = row_scale[size_t(n >> shift) * scale_ld + k / 128];
  uint32_t packed[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t word = j < 2 ? codes.x : codes.y, shift = (j & 1) * 16;
    const __nv_bfloat162 pair = __floats2bfloat162_rn(fp8_value(uint8_t(word >> shift)) * sc,
                                                      fp8_value(uint8_t(word >> (shift + 8))) * sc);
    packed[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  reinterpret_cast<uint4*>(out)[i] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

__global__ void to_bf16_split_kernel(const float* x, int M, int K, int ldx, uint16_t* hi, uint16_t* lo,
                                     uint16_t* lo2) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(M) * K) return;
  const int m = int(i / K), k = int(i % K);
  const float v = x[size_t(m) * ldx + k];
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  const float r = v - __bfloat162float(h);  // exact
  const __nv_bfloat16 l = __float2bfloat16_rn(r);
  hi[i] = *reinterpret_cast<const uint16_t*>(&h);
  lo[i] = *reinterpret_cast<const uint16_t*>(&l);
  if (lo2) {
    const __nv_bfloat16 l2 = __float2bfloat16_rn(r - __bfloat162float(l));
    lo2[i] = *reinterpret_cast<const uint16_t*>(&l2);
  }
}

// The same, four values per thread where rows are whole float4s (K and ldx multiples of 4, x 16-byte aligned): one
// 16-byte load and an 8-byte store per term instead of four 4-byte loads and 2-byte stores each, and one division.
__global__ void to_bf16_split4_kernel(const float* x, int M, int K, int ldx, uint16_t* hi, uint16_t* lo,
                                      uint16_t* lo2) {
  dev::pdl_begin();
  const int K4 = K / 4;
  const size_t q = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= size_t(M) * K4) return;
  const int m = int(q / K4), k = 4 * int(q % K4);
  const float4 v = *reinterpret_cast<const float4*>(x + size_t(m) * ldx + k);
  uint32_t a1, a2, a3, b1, b2, b3;
  split3(v.x, v.y, a1, a2, a3);
  split3(v.z, v.w, b1, b2, b3);
  reinterpret_cast<uint2*>(hi)[q] = make_uint2(a1, b1);
  reinterpret_cast<uint2*>(lo)[q] = make_uint2(a2, b2);
  if (lo2) reinterpret_cast<uint2*>(lo2)[q] = make_uint2(a3, b3);
}

// One thread per output: the parts added in order.
__global__ void add_parts_kernel(const float* parts, int count, size_t stride, int M, int N, int ld, float* y,
                                 int ldy) {
  dev::pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  const int m = i / N, n = i % N;
  float s = parts[size_t(m) * ld + n];
  for (int k = 1; k < count; ++k) s += parts[k * stride + size_t(m) * ld + n];
  y[size_t(m) * ldy + n] = s;
}

__global__ void fp8_weights_to_bf16_kernel(const uint8_t* w, const float* row_scale, int N, int K, int scale_ld,
                                           int shift, uint16_t* out) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * K) return;
  const int n = int(i / K), k = int(i % K);
  __nv_bfloat16 b = __float2bfloat16_rn(fp8_value(w[i]) * row_scale[size_t(n >> shift) * scale_ld + k / 128]);
  out[i] = *reinterpret_cast<uint16_t*>(&b);
}

// The ape row is a weight and the position host-written: both read before the wait. Each thread's scores (up to
// kApeHeld: a C4 compressor's 1024-wide row at 256 threads) load together; a rolled read-add-store loop was one
// round trip per value (a load cannot move above a store that may alias it), every step on the compressors' chain.
constexpr int kApeHeld = 4;
__global__ void add_ape_kernel(float* score, int width, int ld, const int* pos, const float* ape, int ratio) {
  const int t = blockIdx.x;
  const float* bias = ape + size_t(pos[t] % ratio) * width;
  float bv[kApeHeld];
#pragma unroll
  for (int j = 0; j < kApeHeld; ++j) {
    const int f = threadIdx.x + j * blockDim.x;
    bv[j] = f < width ? bias[f] : 0.0f;
  }
  dev::pdl_begin();
  float* row = score + size_t(t) * ld;
  if (width <= kApeHeld * int(blockDim.x)) {
    float v[kApeHeld];
#pragma unroll
    for (int j = 0; j < kApeHeld; ++j) {
      const int f = threadIdx.x + j * blockDim.x;
      v[j] = f < width ? row[f] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kApeHeld; ++j) {
      const int f = threadIdx.x + j * blockDim.x;
      if (f < width) row[f] = v[j] + bv[j];
    }
    return;
  }
  for (int f = threadIdx.x; f < width; f += blockDim.x) row[f] += bias[f];
}

__global__ void swiglu_kernel(const float* h, int rows, int I, float limit, const float* row_weight, float* act) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * I) return;
  const int r = int(i / I), c = int(i % I);
  const float g = fminf(h[size_t(r) * 2 * I + c], limit);
  const float u = fmaxf(-limit, fminf(h[size_t(r) * 2 * I + I + c], limit));
  const float silu = g / (1.0f + expf(-g));
  act[i] = silu * u * (row_weight ? row_weight[r] : 1.0f);
}

__global__ void scale_kernel(float* x, size_t n, float s) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void gather_kernel(const float* x, int D, const int* rows, float* out) {
  dev::pdl_begin();
  const float* src = x + size_t(rows[blockIdx.x]) * D;
  float* dst = out + size_t(blockIdx.x) * D;
  for (int d0 = threadIdx.x; d0 < D; d0 += kCopyBatch * blockDim.x) {
    float v[kCopyBatch];
#pragma unroll
    for (int i = 0; i < kCopyBatch; ++i) v[i] = d0 + i * int(blockDim.x) < D ? src[d0 + i * blockDim.x] : 0.0f;
#pragma unroll
    for (int i = 0; i < kCopyBatch; ++i)
      if (d0 + i * int(blockDim.x) < D) dst[d0 + i * blockDim.x] = v[i];
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_kernel(void* dst, size_t n, int kind, float scale, uint64_t seed) {
  dev::pdl_begin();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float u = float(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float v = (2.0f * u - 1.0f) * scale;
    if (kind == 0) {
      static_cast<float*>(dst)[i] = v;
    } else if (kind == 1) {
      __nv_bfloat16 b = __float2bfloat16_rn(v);
      static_cast<uint16_t*>(dst)[i] = *reinterpret_cast<uint16_t*>(&b);
    } else {
      static_cast<uint8_t*>(dst)[i] = fp8_bits(v);
    }
  }
}

__global__ void fill_value_kernel(float* dst, size_t n, float value) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = value;
}

unsigned blocks_for(size_t n, unsigned per) { return unsigned((n + per - 1) / per); }

}  // namespace

cudaError_t embed_gather(const void* table, bool table_bf16, int D, const int* ids, int T, int hc, float* h,
                         cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (table_bf16)
    dev::launch(embed_kernel<uint16_t>, dim3(T), dim3(256), 0, stream, static_cast<const uint16_t*>(table), D, ids, hc,
                h);
  else
    dev::launch(embed_kernel<float>, dim3(T), dim3(256), 0, stream, static_cast<const float*>(table), D, ids, hc, h);
  return cudaGetLastError();
}

cudaError_t rms_norm(const float* x, int rows, int dim, int ldx, const float* w, float eps, float* out, int ldo,
                     cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  // q_norm's 1024 / 1536 values: 512 threads; a 4096-wide row: 1024 (one batch of kNormHeld each).
  const int threads = dim > 2048 ? kNormMaxThreads : dim >= 1024 ? 512 : 128;
  dev::launch(rms_norm_kernel, dim3(rows), dim3(threads), 0, stream, x, dim, ldx, w, eps, out, ldo);
  return cudaGetLastError();
}

cudaError_t rope(float* x, int T, int heads, int head_dim, int ld, int rope_dim, const int* pos,
                 const float* inv_freq, float attn_scale, bool inverse, float norm_eps, cudaStream_t stream,
                 const float* norm_w, int fp8_block) {
  if (T == 0 || heads == 0) return cudaSuccess;
  // The fused FP8 simulation: one block per row of at most 512 values, after the norm.
  if (fp8_block < 0 || (fp8_block > 0 && (fp8_block % 32 != 0 || norm_eps <= 0.0f || head_dim > 512)))
    return cudaErrorInvalidValue;
  if (fp8_block > 0) {
    dev::launch(rope_norm_fp8_kernel, dim3(T * heads), dim3(256), 0, stream, x, heads, head_dim, ld, rope_dim, pos,
                inv_freq, attn_scale, inverse, norm_eps, norm_w, fp8_block);
    return cudaGetLastError();
  }
  dev::launch(rope_kernel, dim3(blocks_for(size_t(T) * heads, 4)), dim3(128), 0, stream, x, T, heads, head_dim,
              ld, rope_dim, pos, inv_freq, attn_scale, inverse, norm_eps, norm_w);
  return cudaGetLastError();
}

cudaError_t rope_hadamard(float* x, int T, int heads, int head_dim, int ld, int rope_dim, const int* pos,
                          const float* inv_freq, float attn_scale, bool fp4, cudaStream_t stream) {
  if (T == 0 || heads == 0) return cudaSuccess;
  if (head_dim != 128 || rope_dim < 0 || rope_dim > head_dim || rope_dim % 2) return cudaErrorInvalidValue;
  const dim3 grid(blocks_for(size_t(T) * heads, 4));
  if (fp4)
    return dev::launch(rope_hadamard_kernel<true>, grid, dim3(128), 0, stream, x, T, heads, ld, rope_dim, pos,
                       inv_freq, attn_scale);
  return dev::launch(rope_hadamard_kernel<false>, grid, dim3(128), 0, stream, x, T, heads, ld, rope_dim, pos, inv_freq,
                     attn_scale);
}

cudaError_t fp8_block_sim(float* x, int rows, int ld, int width, int block, cudaStream_t stream) {
  return fp8_block_sim_to(x, ld, x, ld, rows, width, block, stream);
}

cudaError_t fp8_block_sim_to(const float* x, int ldx, float* y, int ldy, int rows, int width, int block,
                             cudaStream_t stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  const size_t items = size_t(rows) * ((width + block - 1) / block);
  dev::launch(fp8_block_sim_kernel, dim3(blocks_for(items, 8)), dim3(256), 0, stream, x, ldx, y, ldy, rows, width,
              block);
  return cudaGetLastError();
}

cudaError_t hadamard_fp4_sim(float* x, int rows, int dim, bool fp4, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (dim <= 0 || dim > 1024 || (dim & (dim - 1)) || (fp4 && dim % 32)) return cudaErrorInvalidValue;
  dev::launch(hadamard_fp4_kernel, dim3(rows), dim3(128), dim * sizeof(float), stream, x, dim, fp4);
  return cudaGetLastError();
}

cudaError_t act_quant_fp8(const float* x, int M, int K, int ldx, uint8_t* q, float* scales, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (K % 128 || ldx % 4) return cudaErrorInvalidValue;
  dev::launch(act_quant_kernel, dim3(blocks_for(size_t(M) * (K / 128), 8)), dim3(256), 0, stream, x, M, K, ldx, q,
              scales);
  return cudaGetLastError();
}

cudaError_t to_bf16(const float* x, int M, int K, int ldx, uint16_t* out, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  dev::launch(to_bf16_kernel, dim3(blocks_for(size_t(M) * K, 256)), dim3(256), 0, stream, x, M, K, ldx, out);
  return cudaGetLastError();
}

cudaError_t to_bf16_split(const float* x, int M, int K, int ldx, uint16_t* hi, uint16_t* lo, cudaStream_t stream,
                          uint16_t* lo2) {
  if (M == 0) return cudaSuccess;
  const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  if (K % 4 == 0 && ldx % 4 == 0 && aligned(x, 16) && aligned(hi, 8) && aligned(lo, 8) && aligned(lo2, 8))
    return dev::launch(to_bf16_split4_kernel, dim3(blocks_for(size_t(M) * (K / 4), 256)), dim3(256), 0, stream, x, M,
                       K, ldx, hi, lo, lo2);
  return dev::launch(to_bf16_split_kernel, dim3(blocks_for(size_t(M) * K, 256)), dim3(256), 0, stream, x, M, K, ldx,
                     hi, lo, lo2);
}

cudaError_t add_parts(const float* parts, int count, size_t stride, int M, int N, int ld, float* y, int ldy,
                      cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  const int n = M * N;
  return dev::launch(add_parts_kernel, dim3((n + 255) / 256), dim3(256), 0, stream, parts, count, stride, M, N, ld, y,
                     ldy);
}

cudaError_t fp8_weights_to_bf16(const uint8_t* w, const float* row_scale, int N, int K, int scale_ld, uint16_t* out,
                                cudaStream_t stream, int scale_row_shift) {
  if (N == 0 || K == 0) return cudaSuccess;
  if (scale_row_shift < 0 || scale_row_shift > 30) return cudaErrorInvalidValue;
  if (K % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0)
    return dev::launch(fp8_weights_to_bf16_x8_kernel, dim3(blocks_for(size_t(N) * K / 8, 256)), dim3(256), 0, stream,
                       w, row_scale, N, K, scale_ld, scale_row_shift, out);
  return dev::launch(fp8_weights_to_bf16_kernel, dim3(blocks_for(size_t(N) * K, 256)), dim3(256), 0, stream, w,
                     row_scale, N, K, scale_ld, scale_row_shift, out);
}

cudaError_t add_ape(float* score, int T, int width, int ld, const int* pos, const float* ape, int ratio,
                    cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  dev::launch(add_ape_kernel, dim3(T), dim3(256), 0, stream, score, width, ld, pos, ape, ratio);
  return cudaGetLastError();
}

cudaError_t swiglu(const float* h, int rows, const int* /*rows_dev*/, int I, float limit, const float* row_weight,
                   float* act, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  dev::launch(swiglu_kernel, dim3(blocks_for(size_t(rows) * I, 256)), dim3(256), 0, stream, h, rows, I, limit,
              row_weight, act);
  return cudaGetLastError();
}

cudaError_t scale_values(float* x, size_t n, float s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dev::launch(scale_kernel, dim3(blocks_for(n, 256)), dim3(256), 0, stream, x, n, s);
  return cudaGetLastError();
}

cudaError_t gather_rows(const float* x, int D, const int* rows, int count, float* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  dev::launch(gather_kernel, dim3(count), dim3(256), 0, stream, x, D, rows, out);
  return cudaGetLastError();
}

cudaError_t fill_uniform(void* dst, size_t n, int kind, float scale, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const size_t blocks = std::min<size_t>((n + 255) / 256, 65536);
  dev::launch(fill_kernel, dim3(unsigned(blocks)), dim3(256), 0, stream, dst, n, kind, scale, seed);
  return cudaGetLastError();
}

cudaError_t fill_value(float* dst, size_t n, float value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dev::launch(fill_value_kernel, dim3(blocks_for(n, 256)), dim3(256), 0, stream, dst, n, value);
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
