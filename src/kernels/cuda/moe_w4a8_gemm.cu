// MXFP4-weight x FP8-activation grouped GEMM for Hopper (sm_90a): moe_grouped_gemm_w4a8_{contiguous,masked}.
//
// Scheme (swap-AB). Per CTA tile: 64*WG weight rows x BN tokens of one expert, the whole K.
//  - A producer warp streams, per pipeline stage, G groups of 128 k: the FP8 activation tile [BN x 128] per
//    group by TMA (128-byte swizzle, the wgmma B layout), the per-token scales [G x BN] by TMA, and each
//    warpgroup's packed MXFP4 chunks (64 rows x 128 k, 4352 bytes, kernels/cpu/moe_w4a8_pack.h) by 1-D bulk
//    copies; full/empty mbarriers per stage.
//  - Each consumer warpgroup turns its 64x128 MXFP4 chunk into four wgmma A fragments in registers:
//    e2m1 -> e4m3 by a byte permute through an 8-entry table per (row, 32-block). The packer stores each
//    block's exponent relative to its row's reference R (u = e - R + 12, in [1, 12] on the fast path), so the
//    table is base + u * step and values become v * 2^(u - 6), exact in e4m3. The activations' channel order
//    (moe_w4a8_pack.h) gives each thread the values of one block per row (block t4), so one table per row and
//    group serves all four k-steps. Four m64nBNk32 wgmmas accumulate
//    the group in fp32 (tensor-core precision), then the group is promoted into the fp32 accumulator with
//    sa[token] (a power of two, so the product is exact); the epilogue applies the row's 2^(R - 133) once.
//    Tiles wider than the per-group accumulator allows are taken as sub-tiles of SUB tokens in turn, all from the
//    same converted fragments.
//  - 96- and 128-token tiles: three copier warps (the producer warpgroup's others) put each landed stage's token
//    scales into the consumers' fragment order, so that the promotion loads them 16 bytes at a time.
//  - Groups whose 64-row block has a block more than 11 exponents below its row's R (flag bit from the
//    packer) take an exact slower path: each 32-block j on its own (v * 2^6 from the threads that hold block j,
//    zeros from the others), four k32 wgmmas, promoted with 2^(e_j - R) * sa.
//  - Persistent grid: CTAs walk the (expert, weight tile, token tile) list computed from the device counts,
//    so the launch shape never depends on the routing (graph capturable).
//  - In a decode chain (MoeW4A8Chain) the producer asks L2 for the next GEMM's first stages of its rows once its
//    own loads are issued, and a GEMM whose counts are settled schedules and loads weights before pdl_wait.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/env.h"
#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/moe_w4a8.h"
#include "kernels/cuda/wgmma_rs_fp8.cuh"

namespace moeserve::cuda {

namespace {

namespace pack = moeserve::kernels::cpu;

constexpr int kMaxExperts = 512;

// Ablation probes for measuring what bounds the main loop (moe-w4a8.md, forty-first session; built by
// `PROBES="2 4 7" scripts/device-prepare.sh`): MOESERVE_W4A8_PROBE=BITS leaves out 1 the promotion (scale loads
// and FMAs; one add per sub-tile keeps the wgmma's result used), 2 the e2m1 -> e4m3 conversion (the raw words go to
// the wgmmas), 4 the wgmmas (fences, commits and waits stay; the fragments are folded into a word instead), 8 the
// promotion's token-scale loads (a run-time 1.0 instead). What a probe keeps ends in a sink stored under a
// condition the compiler cannot rule out, so that ptxas does not delete it as dead code. Bit 1 makes ptxas
// serialize the prefill configs' wgmmas (C7511, insufficient registers for the wgmma pipeline), so it does not
// time the promotion alone. Outputs are wrong; timing only.
// Bit 16 is not an ablation: the outputs stay right, and each CTA records when it reaches the points of a launch
// (MoeW4A8TimelineEvent) in a device array that moe_w4a8_timeline reads (`PROBES=16 scripts/device-prepare.sh`,
// `bench_gpu_moe_w4a8_p16 --timeline`; moe-w4a8.md, forty-fourth session).
#ifndef MOESERVE_W4A8_PROBE
#define MOESERVE_W4A8_PROBE 0
#endif
constexpr int kProbe = MOESERVE_W4A8_PROBE;
constexpr bool kTimeline = (kProbe & 16) != 0;
#if MOESERVE_W4A8_PROBE & 16
__device__ uint64_t g_timeline[kMoeW4A8TimelineCtas][kMoeW4A8TimelineEvents];
#endif
// The global timer (ns) into this CTA's slot of the timeline (timeline probe builds only).
__device__ __forceinline__ void timeline_mark(int event) {
#if MOESERVE_W4A8_PROBE & 16
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (blockIdx.x < kMoeW4A8TimelineCtas) g_timeline[blockIdx.x][event] = t;
#else
  (void)event;
#endif
}

// Bit 32 keeps the outputs right too: the pipeline's hand-over points (a stage landing, its release, the wgmma
// issue, the producer's copies, the epilogue) sleep for pseudo-random times of up to ~2 us, a quarter of them, per
// warp (a converged warp reads one clock), so that a plain run on the hardware meets the orders a sanitizer's slowed
// instructions make (test_gpu_p32, `PROBES=32 scripts/device-prepare.sh`; moe-w4a8.md, fifty-eighth session). The
// consumers reconverge with __syncwarp after it.
constexpr bool kJitter = (kProbe & 32) != 0;
__device__ __forceinline__ void jitter(uint32_t salt) {
  if constexpr (kJitter) {
    uint32_t t;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(t));
    uint32_t h = t ^ (salt * 0x9e3779b9u) ^ (blockIdx.x * 0x85ebca6bu) ^
                 ((threadIdx.x >> 5) * 0xc2b2ae35u);
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    if ((h & 3) == 0) __nanosleep((h >> 8) & 2047);
  } else {
    (void)salt;
  }
}
// A consumer warp's jitter, reconverged (the next instructions may be .aligned).
__device__ __forceinline__ void jitter_warp(uint32_t salt) {
  if constexpr (kJitter) {
    jitter(salt);
    __syncwarp();
  }
}

// Bit 64 keeps the outputs right as well: each consumer thread compares its part of every group's weight chunk and
// activation tile in shared memory with their global source, when the group is loaded and again when its wgmmas are
// done (before the stage's release), and counts the differences in g_stage_check, which run_gemm prints after each
// launch (test_gpu_p64; moe-w4a8.md, fifty-eighth session): a stage read before its bytes landed differs at the
// load, one overwritten while in use differs at the finish.
#if MOESERVE_W4A8_PROBE & 64
// [0] checks made (one per warpgroup, group and check point), [1] weights / [2] activations: threads that found a
// difference at the load, [3] / [4] at the finish, [5] the first difference: block << 40 | item << 8 | group << 1 |
// at finish.
__device__ unsigned long long g_stage_check[6];
#endif

// Bit 128 keeps the outputs right too, and times a later stage release: a stage's last group hands the stage back after
// the next group's wgmmas are issued (or after the item's last group) instead of right after its own promotion. The
// release waits for the promotion's scale loads (mbar_arrive_after, fifty-ninth session); released later, the loads
// are long done and the warp does not stall at the arrive before issuing the next wgmmas (`PROBES=128
// scripts/device-prepare.sh` -> test_gpu_p128 and bench_gpu_moe_w4a8_p128). Measured on an H100 in the sixtieth
// session: outputs right, 1.1 % slower (prefill 1.8 %) by the means of three rounds, so it stays a probe.
constexpr bool kDeferRelease = (kProbe & 128) != 0;

using namespace hopper;

// 2^(R - 133) for a row's reference exponent R (the epilogue's row factor: the e4m3 values carry 2^6).
__device__ __forceinline__ float pow2_e8m0_minus6(uint32_t e) {
  return e >= 7 ? __uint_as_float((e - 6) << 23) : ldexpf(1.0f, int(e) - 133);
}

// 2^(e - R) from a stored byte u = (e - R + 12) mod 256 (slow path; e <= R, so u > 12 means u - 256).
// Blocks more than 149 exponents below R underflow to 0 here (their values are below 2^-149 of the row's).
__device__ __forceinline__ float pow2_rel(uint32_t u) {
  const int d = (u <= 12u ? int(u) : int(u) - 256) - 12;
  return d >= -126 ? __uint_as_float(uint32_t(d + 127) << 23) : ldexpf(1.0f, d);
}

// PTX prmt: selector nibbles with bit 3 clear select bytes (the caller guarantees it). __byte_perm would
// re-mask the selector with 0x7777 on every call (one more integer op per permute).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Eight e2m1 values of a packed word -> two words of four e4m3 bytes, through the 8-byte table {lo, hi}:
// five integer-pipe ops (mask, 2 byte permutes, 2 sign merges); the two shifts are done as multiplies so that
// they issue on the FMA pipe (the integer pipe is what bounds decode).
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t w, uint32_t lo, uint32_t hi, uint32_t& r_lo,
                                               uint32_t& r_hi) {
  const uint32_t m = w & 0x77777777u;
  r_lo = prmt(lo, hi, m) | (w & 0x80808080u);
  r_hi = prmt(lo, hi, __umulhi(m, 0x10000u)) | ((w * 16u) & 0x80808080u);
}

// Table words for table offset u (value v -> v * 2^(u-6)): base + u * step.
constexpr uint32_t kLutLo0 = 0x0C080000u, kLutLoStep = 0x08080800u;
constexpr uint32_t kLutHi0 = 0x1C181410u, kLutHiStep = 0x08080808u;

// ---------------------------------------------------------------------------------------------------------
// Kernel
// ---------------------------------------------------------------------------------------------------------
struct Params {
  const uint8_t* w;         // packed weights
  const uint64_t* flags;    // wide flags
  const int* counts;        // [E]
  void* y;                  // [rows][N]
  size_t expert_bytes;      // packed bytes per expert
  size_t ref_offset;        // offset of the row references R[N] inside an expert
  int E, N, K, cap;         // cap > 0: masked
  int flag_words;           // per 64-row block
  int out_f32;
  int counts_settled;       // MoeW4A8Chain::counts_settled
  const uint8_t* pf_w;      // MoeW4A8Chain::prefetch_next (packed), or null
  size_t pf_expert_bytes;   // its packed bytes per expert
  uint32_t pf_pitch;        // its bytes per 64-row block
  int pf_blocks;            // its 64-row blocks per expert
  uint32_t pf_prefix;       // bytes to prefetch per block
  const int* settled_ids;   // MoeW4A8Chain::settled_ids ([id_slots] expert ids), or null
  int id_slots;
  int rows_lo, rows_hi;     // only experts with rows_lo <= rows <= rows_hi get work items (MoeW4A8Split)
  int* item_counter;        // MoeW4A8Chain::item_counter, or null
  int every_thread_releases;  // every consumer thread arrives on a stage's empty barrier (run_gemm: the stage release)
#if MOESERVE_W4A8_PROBE & 64
  const uint8_t* a;  // the activations (MoeW4A8Input::a), for the stage check
  int rows;          // MoeW4A8Input::rows
#endif
};

// The expert owning work item `it`: item_start[e] <= it < item_start[e + 1] (binary search: a CTA's first item
// may lie hundreds of experts in, and a linear walk over shared memory cost microseconds at small batches).
__device__ __forceinline__ int expert_of_item(const int* item_start, int E, int it) {
  int lo = 0, hi = E;  // item_start[lo] <= it < item_start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (item_start[mid] <= it) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Where work item `it` lies: expert e's block nbt of 64 WG weight rows and token tile tt (of BN rows, the
// first at row0 of the activations). One definition for the producer, the copiers and the consumers, which must agree.
struct WorkItem {
  int e, nbt, tt, row0;
};
template <int BN>
__device__ __forceinline__ WorkItem work_item(const int* item_start, const int* cnt, const int* row_start, int E,
                                              int it) {
  WorkItem x;
  x.e = expert_of_item(item_start, E, it);
  const int ntt = (cnt[x.e] + BN - 1) / BN;  // the expert's token tiles
  const int local = it - item_start[x.e];
  x.nbt = local / ntt;
  x.tt = local % ntt;
  x.row0 = row_start[x.e] + x.tt * BN;
  return x;
}

// The first M of an array's N elements, as an array (a narrower wgmma's accumulators).
template <int M, int N>
__device__ __forceinline__ float (&first_of(float (&a)[N]))[M] {
  static_assert(M <= N, "a prefix");
  return *reinterpret_cast<float(*)[M]>(&a);
}

// f(std::integral_constant<int, i>) for i = 0 .. N-1, in order (a loop whose index is a compile-time constant).
template <class F, int... I>
__device__ __forceinline__ void unroll_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void unroll(F&& f) {
  unroll_impl(f, std::make_integer_sequence<int, N>{});
}

// f(std::integral_constant<int, min(n, N)>) for n >= 1: a count known at run time as a compile-time constant.
template <int N, class F>
__device__ __forceinline__ void with_count(int n, F&& f) {
  if constexpr (N == 1) {
    f(std::integral_constant<int, 1>{});
  } else {
    if (n >= N) f(std::integral_constant<int, N>{});
    else with_count<N - 1>(n, f);
  }
}

// BN tokens per tile, taken by the wgmmas SUB tokens at a time (SUB < BN: the tile's sub-tiles share each group's
// converted A fragments, so the conversion is spread over BN tokens while the per-group tensor-core accumulator
// holds SUB columns; BN > 160 fits the registers only this way).
template <int BN_, int WG_, int G_, int S_, int MINB_, bool PF_ = (BN_ <= 64), int SUB_ = BN_>
struct Cfg {
  static constexpr int BN = BN_, WG = WG_, G = G_, S = S_, MINB = MINB_, SUB = SUB_, H = BN_ / SUB_;
  // A tile's last sub-tile is issued kTailStep tokens at a time (its wgmmas as narrow as its tokens need, in steps
  // of 32 from 96-token sub-tiles up): the tokens an expert's rows leave in its last tile cost their own columns,
  // not a whole sub-tile's.
  static constexpr int kTailStep = SUB_ >= 96 ? 32 : SUB_;
  static constexpr int kTails = SUB_ / kTailStep;
  // Two consumer warpgroups: a whole producer warpgroup, so that setmaxnreg can move registers to the
  // consumers (ptxas budgets a 288-thread block like a 384-thread one anyway). One: a single producer warp.
  static constexpr bool kSetMaxNReg = WG >= 2;
  static constexpr int kThreads = 128 * WG + (kSetMaxNReg ? 128 : 32);
  static constexpr int kEntryRegs = ((65536 / (kThreads * MINB)) / 8) * 8 > 255 ? 248 : ((65536 / (kThreads * MINB)) / 8) * 8;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs =
      ((kEntryRegs * kThreads - kProducerRegs * 128) / (128 * WG)) / 8 * 8 > 232
          ? 232
          : ((kEntryRegs * kThreads - kProducerRegs * 128) / (128 * WG)) / 8 * 8;
  static constexpr int kActBytes = G * BN * 128;                       // multiple of 1024
  // Token scales: the TMA box starts at the tile's first row rounded down to 4 floats (a tensor copy's
  // innermost start must be 16-byte aligned; an unaligned one faults with an illegal instruction), so each
  // group's row holds BN + 4 floats and the tile starts at (row0 & 3).
  static constexpr int kSaPitch = BN + 4;
  static constexpr int kSaBytes = ((G * kSaPitch * 4 + 127) / 128) * 128;
  static constexpr int kWBytes = WG * G * pack::kChunkBytes;
  // Token scales in fragment order (96- and 128-token tiles): the producer warpgroup's three idle warps copy each
  // landed stage's token scales into the consumers' fragment order, so that a thread takes the 4 scales of two column
  // pairs with one 16-byte load (W / 16 loads per sub-tile of W tokens instead of W / 4): 3-8 % faster at 4K-16K
  // tokens on the H200. Per sub-tile, thread column t4's scales are 4 * (SUB / 16) floats in a row of SUB / 4 + 4
  // floats (the 4: the four rows start on different banks). With it the 160- and 192-token tiles spilled (204 and 32
  // bytes) and ran 2-9 % slower, so they keep the per-column loads (moe-w4a8.md, forty-second session).
  static constexpr bool kFragSa = WG >= 2 && BN >= 96 && BN <= 128;
  // Work items from MoeW4A8Chain::item_counter: the configs whose copier warps (kFragSa) walk the items too keep the
  // fixed order, and so does the 160-token tile, whose registers the code for it rearranged (12 % slower with the
  // counter unused, V4-Flash W13 at 32K tokens; moe-w4a8.md, forty-fifth session).
  static constexpr bool kDynamicItems = !kFragSa && BN != 160;
  static constexpr int kFsRow = SUB / 4 + 4, kFsSub = 4 * kFsRow, kFsGroup = H * kFsSub;  // floats
  static constexpr int kFsBytes = kFragSa ? ((G * kFsGroup * 4 + 127) / 128) * 128 : 0;
  static constexpr int kFsOffset = kActBytes + kSaBytes + kWBytes;
  static constexpr int kStageBytes = ((kActBytes + kSaBytes + kWBytes + kFsBytes + 1023) / 1024) * 1024;
  static_assert(!kFragSa || (kFsOffset % 16 == 0 && (kFsRow * 4) % 16 == 0),
                "16-byte loads of the fragment-order scales");
  static constexpr int kStagePitch = 68;                               // floats per staged token row (64 + 4)
  static constexpr int kStagingBytes = WG * SUB * kStagePitch * 4;  // the epilogue stages one sub-tile at a time
  static constexpr int kSchedBytes = (3 * kMaxExperts + 1) * 4;
  static constexpr int kBarBytes = 3 * S * 8;  // full, empty, scales-ready
  static constexpr int kSmemBytes = 1024 /*align slack*/ + S * kStageBytes + kStagingBytes + kBarBytes + kSchedBytes;
  static_assert(SUB % 8 == 0 && SUB <= 160, "wgmma N (the generated wrappers go to 160)");
  static_assert(BN % SUB == 0 && BN + 4 <= 256, "whole sub-tiles; the token scales' TMA box is at most 256 wide");
  static_assert(kConsumerRegs >= 24 && kProducerRegs >= 24 && kEntryRegs >= 24, "register split");
  // Convert the next group while the current group's wgmmas run (a second A-fragment set in registers). On by
  // default up to 64 tokens; the "_pf" configs turn it on at 128 (ptxas 13.0: 4 bytes spilled at the consumers'
  // 232 registers), which made every prefill shape 8-23 % faster on the H200 (moe-w4a8.md, eleventh session).
  static constexpr bool kPrefetch = PF_;
  static_assert(kSmemBytes <= 232448, "shared memory");
};

// Per-group state carried from conversion to promotion.
struct GroupRegs {
  uint32_t a[4][4];  // A fragments of the 4 k-steps
  uint32_t stage, gin;
  bool wide;
#if MOESERVE_W4A8_PROBE & 64
  int gi;  // the group's index in K (the stage check)
#endif
};

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::MINB)
    moe_w4a8_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_sa,
                         const Params p) {
  constexpr int BN = C::BN, WG = C::WG, G = C::G, S = C::S, SUB = C::SUB, H = C::H;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* stages = smem;
  float* staging = reinterpret_cast<float*>(smem + S * C::kStageBytes);
  uint64_t* full_bar = reinterpret_cast<uint64_t*>(smem + S * C::kStageBytes + C::kStagingBytes);
  uint64_t* empty_bar = full_bar + S;
  uint64_t* fs_bar = empty_bar + S;  // C::kFragSa: the stage's scales in fragment order (each copier thread arrives)
  int* item_start = reinterpret_cast<int*>(fs_bar + S);  // [E + 1]
  // Dynamic items: the producer writes each item's index at its first stage (before the stage's arrive, whose
  // release the consumers' wait acquires), -1 after the last; rewritten only once the stage is released. The consumers
  // read it for every item but a CTA's first, which they take by its index.
  __shared__ int stage_item[S];
  int* row_start = item_start + kMaxExperts + 1;            // [E]
  int* cnt = row_start + kMaxExperts;                       // [E]

  const int NG = p.K / 128;
  const int n_chunks = NG / G;
  const int NBT = p.N / (64 * WG);  // weight tiles per expert
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (kTimeline && threadIdx.x == 0) timeline_mark(kTlStart);

  // Before pdl_wait (the previous kernel may still run): the producer's descriptors and the barriers.
  if (warp == 4 * WG && lane == 0) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_sa)) : "memory");
  }
  // The schedule's __syncthreads publishes them. One arrival per consumer warp, or per thread (run_gemm: the stage
  // release).
  init_stage_barriers<S>(full_bar, empty_bar, p.every_thread_releases ? 128 * WG : 4 * WG);
  constexpr int kCopiers = 3, kCopierThreads = 32 * kCopiers;  // C::kFragSa: the producer warpgroup's warps 1-3
  if constexpr (C::kFragSa)
    if (threadIdx.x == 0)
      for (int s = 0; s < S; ++s) mbar_init(&fs_bar[s], kCopierThreads);
  // Settled counts (MoeW4A8Chain): the schedule and the first stages' weights do not wait for the previous kernel.
  if (!p.counts_settled) dev::pdl_begin();
  if (kTimeline && !p.counts_settled && threadIdx.x == 0) timeline_mark(kTlWait);

  // Schedule: items of expert e = NBT * ceil(cnt / BN), in expert order; none for experts outside the launch's row
  // range (MoeW4A8Split's other launch computes those; their rows still count in the row layout). The experts'
  // chunks of 32 are scanned by all warps at once (a chunk per warp, its counts loaded up front), then each thread
  // adds the earlier chunks' totals to its experts: two short chains instead of one warp's sixteen dependent scans.
  {
    constexpr int kChunks = kMaxExperts / 32, kPerWarp = (kChunks + 3) / 4;
    static_assert(C::kThreads >= 4 * 32, "the scan's chunks need at least 4 warps");
    __shared__ int chunk_items[kChunks], chunk_rows[kChunks];
    const int nwarps = int(blockDim.x) / 32, nchunks = (p.E + 31) / 32;
    if (p.settled_ids) {  // the counts from the slots' ids (cnt is rewritten with the same values below)
      for (int e = threadIdx.x; e < p.E; e += blockDim.x) cnt[e] = 0;
      __syncthreads();
      for (int s = threadIdx.x; s < p.id_slots; s += blockDim.x) {
        const int e = __ldcg(p.settled_ids + s);
        if (e >= 0 && e < p.E) atomicAdd(&cnt[e], 1);
      }
      __syncthreads();
    }
    int c_of[kPerWarp];
#pragma unroll
    for (int j = 0; j < kPerWarp; ++j) {
      const int e = 32 * (warp + nwarps * j) + lane;
      c_of[j] = e < p.E ? (p.settled_ids ? cnt[e] : max(__ldcg(p.counts + e), 0)) : 0;
    }
#pragma unroll
    for (int j = 0; j < kPerWarp; ++j) {
      const int ch = warp + nwarps * j;
      if (ch >= nchunks) break;
      const int e = 32 * ch + lane;
      const int c = p.cap > 0 ? min(c_of[j], p.cap) : c_of[j];
      const int items = c >= p.rows_lo && c <= p.rows_hi ? NBT * ((c + BN - 1) / BN) : 0;
      int inc_items = items, inc_rows = c;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int vi = __shfl_up_sync(0xffffffffu, inc_items, off);
        const int vr = __shfl_up_sync(0xffffffffu, inc_rows, off);
        if (lane >= off) {
          inc_items += vi;
          inc_rows += vr;
        }
      }
      if (e < p.E) {  // exclusive within the chunk for now
        item_start[e] = inc_items - items;
        row_start[e] = inc_rows - c;
        cnt[e] = c;
      }
      if (lane == 31) {
        chunk_items[ch] = inc_items;
        chunk_rows[ch] = inc_rows;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e <= p.E; e += blockDim.x) {
      const int ch = e / 32;
      int items_before = 0, rows_before = 0;
      for (int k = 0; k < ch; ++k) {
        items_before += chunk_items[k];
        rows_before += chunk_rows[k];
      }
      if (e == p.E) {
        item_start[e] = items_before + (p.E % 32 ? chunk_items[ch] : 0);
      } else {
        item_start[e] += items_before;
        row_start[e] = p.cap > 0 ? e * p.cap : row_start[e] + rows_before;
      }
    }
  }
  __syncthreads();
  const int total_items = item_start[p.E];
  if (kTimeline && threadIdx.x == 0) timeline_mark(kTlScheduled);
  // Work items from the counter only when some CTA has more than one (with one wave the fixed order is the same
  // schedule, and the counter is left alone).
  const bool dynamic = C::kDynamicItems && p.item_counter != nullptr && total_items > int(gridDim.x);

  if (warp >= 4 * WG) {
    // ------------------------------ producer ------------------------------
    if constexpr (C::kSetMaxNReg) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(C::kProducerRegs));
    if (warp != 4 * WG || lane != 0) {
      if (p.counts_settled) dev::pdl_begin();
      if constexpr (C::kFragSa) {
        if (warp == 4 * WG) return;
        // Copier: after each stage lands, its token scales [G][sa_off + column] into fragment order
        // [G][h][t4][i / 2][(i % 2) * 2 + j] for column c = h SUB + 8 i + 2 t4 + j.
        // A thread's columns c = ctid + kCopierThreads k are the same in every stage: their offsets are computed once.
        constexpr int kCols = (BN + kCopierThreads - 1) / kCopierThreads;
        const int ctid = (warp - 4 * WG - 1) * 32 + lane;
        uint32_t src_col[kCols], dst_col[kCols];
#pragma unroll
        for (int k = 0; k < kCols; ++k) {
          const int c = min(ctid + kCopierThreads * k, BN - 1);  // past BN: not copied (the test below)
          const int h = c / SUB, r = c % SUB, i = r / 8, t4 = (r % 8) / 2;
          src_col[k] = uint32_t(C::kActBytes + 4 * c);
          dst_col[k] =
              uint32_t(C::kFsOffset + 4 * (h * C::kFsSub + t4 * C::kFsRow + 4 * (i / 2) + 2 * (i % 2) + (r & 1)));
        }
        const uint32_t stages_base = smem_addr(stages);
        int stage = 0;
        uint32_t phase = 0;
        for (int it = blockIdx.x; it < total_items; it += gridDim.x) {
          const uint32_t off = 4u * uint32_t(work_item<BN>(item_start, cnt, row_start, p.E, it).row0 & 3);
          for (int kc = 0; kc < n_chunks; ++kc) {
            mbar_wait(&full_bar[stage], phase);
            const uint32_t base = stages_base + uint32_t(stage * C::kStageBytes);
#pragma unroll
            for (int gin = 0; gin < G; ++gin)
#pragma unroll
              for (int k = 0; k < kCols; ++k)
                if (ctid + kCopierThreads * k < BN)
                  sts32(base + dst_col[k] + 4 * gin * C::kFsGroup,
                        lds32(base + src_col[k] + off + 4 * gin * C::kSaPitch));
            mbar_arrive(&fs_bar[stage]);  // every thread: each releases its own writes
            if (++stage == S) {
              stage = 0;
              phase ^= 1;
            }
          }
        }
      }
      return;
    }
    int stage = 0;
    uint32_t phase = 0;
    constexpr uint32_t kTxBytes = uint32_t(G * BN * 128 + G * C::kSaPitch * 4 + WG * G * pack::kChunkBytes);
    struct Item : WorkItem {
      const uint8_t* wsrc;  // the expert's packed weights
    };
    auto item_of = [&](int it) {
      const WorkItem wi = work_item<BN>(item_start, cnt, row_start, p.E, it);
      return Item{wi, p.w + size_t(wi.e) * p.expert_bytes};
    };
    auto load_weights = [&](const Item& x, int kc, uint8_t* st, uint64_t* bar) {
#pragma unroll
      for (int w = 0; w < WG; ++w) {
        const size_t chunk = size_t(x.nbt * WG + w) * NG + size_t(kc) * G;
        bulk_load(st + C::kActBytes + C::kSaBytes + w * G * pack::kChunkBytes, x.wsrc + chunk * pack::kChunkBytes,
                  uint32_t(G * pack::kChunkBytes), bar);
      }
    };
    // Settled counts: the first item's first stages of weights before pdl_wait (fresh stages: no empty wait).
    int early = 0;
    if (p.counts_settled) {
      if (int(blockIdx.x) < total_items) {
        const Item x = item_of(blockIdx.x);
        early = min(S, n_chunks);
        for (int kc = 0; kc < early; ++kc) {
          mbar_arrive_expect_tx(&full_bar[kc], kTxBytes);
          load_weights(x, kc, stages + kc * C::kStageBytes, &full_bar[kc]);
        }
      }
      dev::pdl_begin();
    }
    // Dynamic items: the first by the CTA's index, the next ones from the counter, each fetched when the current
    // item's last stage is issued (so that the CTAs that get through their items first take the next ones; fetched at
    // an item's start, the second wave's items went to CTAs at random, several to some SMs), and only after pdl_wait
    // (the previous launch, which leaves the counter at 0, is complete by then). Every CTA fetches
    // until it gets an index past the items, so the launch fetches max(items, grid) times in all; the last fetch
    // puts the counter back to 0.
    const int grid = int(gridDim.x), fetches = max(total_items, grid);
    auto take = [&](int fetched) {  // the item of a fetched counter value
      if (fetched == fetches - 1) atomicExch(p.item_counter, 0);  // the launch's last fetch
      return grid + fetched;
    };
    int it = int(blockIdx.x);
    if (dynamic && it >= total_items) it = take(atomicAdd(p.item_counter, 1));
    while (it < total_items) {
      const Item x = item_of(it);
      int fetched = 0;  // the next item's counter value
      for (int kc = 0; kc < n_chunks; ++kc) {
        uint8_t* st = stages + stage * C::kStageBytes;
        const bool issued = it == int(blockIdx.x) && kc < early;  // weights and expect_tx already issued
        if (!issued) {
          mbar_wait(&empty_bar[stage], phase ^ 1);
          jitter(1);
          if (dynamic && kc == 0) stage_item[stage] = it;
          mbar_arrive_expect_tx(&full_bar[stage], kTxBytes);
        }
#pragma unroll
        for (int gi = 0; gi < G; ++gi)
          tma_load_2d(st + gi * BN * 128, &tmap_a, &full_bar[stage], (kc * G + gi) * 128, x.row0);
        jitter(2);
        tma_load_2d(st + C::kActBytes, &tmap_sa, &full_bar[stage], x.row0 & ~3, kc * G);
        if (!issued) load_weights(x, kc, st, &full_bar[stage]);
        if (kTimeline && it == int(blockIdx.x) && kc == 0) timeline_mark(kTlFirstIssued);
        if (dynamic && kc == n_chunks - 1) fetched = atomicAdd(p.item_counter, 1);
        if (++stage == S) {
          stage = 0;
          phase ^= 1;
        }
      }
      const int next = dynamic ? take(fetched) : it + grid;
      // The last wave's items: the next GEMM's first stages of the same expert's corresponding rows into L2.
      if (p.pf_w && x.tt == 0 && next >= total_items) {
        const uint8_t* nw = p.pf_w + size_t(x.e) * p.pf_expert_bytes;
        for (int b = x.nbt * p.pf_blocks / NBT; b < (x.nbt + 1) * p.pf_blocks / NBT; ++b)
          dev::prefetch_l2(nw + size_t(b) * p.pf_pitch, p.pf_prefix);
      }
      it = next;
    }
    if (dynamic) {  // no more items: the consumers find -1 at their next stage
      mbar_wait(&empty_bar[stage], phase ^ 1);
      stage_item[stage] = -1;
      mbar_arrive(&full_bar[stage]);
    }
    return;
  }

  // ------------------------------ consumers ------------------------------
  if constexpr (C::kSetMaxNReg) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(C::kConsumerRegs));
  if (p.counts_settled) dev::pdl_begin();
  if (kTimeline && p.counts_settled && threadIdx.x == 0) timeline_mark(kTlWait);
  const int wg = warp / 4;
  const int tid = threadIdx.x % 128;
  const int wq = tid / 32;               // warp within the warpgroup
  const int g8 = lane / 4, t4 = lane % 4;
  const int r0 = 16 * wq + g8;           // rows r0 and r0 + 8 of the 64-row block
  float* stage_out = staging + wg * SUB * C::kStagePitch;

  int ld_stage = 0;
  uint32_t ld_phase = 0;
  int rel_stage = 0;
  int e = 0;

  float acc[BN / 2];
  float tmp[SUB / 2];  // one sub-tile's group
  uint32_t probe_sink = 0;                                          // kProbe only
  const float probe_one = __uint_as_float(0x3f800000u + (p.E >> 30));  // kProbe only: 1.0 (E < 2^30), not a constant
  if constexpr ((kProbe & 4) != 0) {
#pragma unroll
    for (int i = 0; i < SUB / 2; ++i) tmp[i] = __uint_as_float(lane * 0x01000193u);  // not a constant
  }

  const uint32_t stages_addr = smem_addr(stages);
  const uint32_t runtime_zero = uint32_t(p.E) >> 30;  // 0 (E <= kMaxExperts), unknown to the compiler
  // Shared address of this warpgroup's packed chunk of a group.
  auto chunk_addr = [&](const GroupRegs& gr) {
    return stages_addr + gr.stage * C::kStageBytes + C::kActBytes + C::kSaBytes + (wg * G + gr.gin) * pack::kChunkBytes;
  };
#if MOESERVE_W4A8_PROBE & 64
  const uint8_t* check_w = nullptr;  // the current item's first weight chunk of this warpgroup's rows
  int check_row0 = 0, check_item = 0;
  // This thread's part of group gr.gi's weight chunk and activation tile (128-byte swizzle: 16-byte unit j of row r
  // at unit j ^ (r % 8)) against their global source; rows past the activations are the TMA's zero fill.
  auto stage_check = [&](const GroupRegs& gr, int at_finish) {
    const int gi = gr.gi;
    const uint32_t chunk = chunk_addr(gr);
    const uint8_t* src = check_w + size_t(gi) * pack::kChunkBytes;
    bool w_bad = false, a_bad = false;
    for (int o = tid * 16; o < int(pack::kChunkBytes); o += 128 * 16) {
      const uint4 q = lds128(chunk + o), g = __ldcg(reinterpret_cast<const uint4*>(src + o));
      w_bad |= q.x != g.x || q.y != g.y || q.z != g.z || q.w != g.w;
    }
    const uint32_t act = stages_addr + gr.stage * C::kStageBytes + gr.gin * BN * 128;
    for (int u = tid; u < BN * 8; u += 128) {
      const int r = u / 8, j = u % 8;
      const uint4 q = lds128(act + r * 128 + ((j ^ (r & 7)) * 16));
      uint4 g = make_uint4(0, 0, 0, 0);
      if (check_row0 + r < p.rows)
        g = __ldcg(reinterpret_cast<const uint4*>(p.a + size_t(check_row0 + r) * p.K + gi * 128 + j * 16));
      a_bad |= q.x != g.x || q.y != g.y || q.z != g.z || q.w != g.w;
    }
    if (tid == 0) atomicAdd(&g_stage_check[0], 1ull);
    if (w_bad) atomicAdd(&g_stage_check[1 + 2 * at_finish], 1ull);
    if (a_bad) atomicAdd(&g_stage_check[2 + 2 * at_finish], 1ull);
    if (w_bad || a_bad)
      atomicCAS(&g_stage_check[5], 0ull,
                (uint64_t(blockIdx.x) << 40) | (uint64_t(check_item) << 8) | (uint64_t(gi) << 1) | uint64_t(at_finish));
  };
#endif
  // The chunk's e2m1 words of this thread -> its A fragments, through the tables {lo0, hi0} (row r0) and {lo1, hi1}
  // (row r0 + 8).
  auto convert_group = [&](uint32_t chunk, uint32_t lo0, uint32_t hi0, uint32_t lo1, uint32_t hi1,
                           uint32_t (&a)[4][4]) {
    const uint4 q0 = lds128(chunk + tid * 16);
    const uint4 q1 = lds128(chunk + 2048 + tid * 16);
    const uint32_t words[2][4] = {{q0.x, q0.y, q0.z, q0.w}, {q1.x, q1.y, q1.z, q1.w}};
    if constexpr (kProbe & 2) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int j = 0; j < 4; ++j) a[ks][j] = words[ks >> 1][(ks & 1) * 2 + (j & 1)] ^ (j >> 1);
    } else {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        e2m1x8_to_e4m3(words[ks >> 1][(ks & 1) * 2 + 0], lo0, hi0, a[ks][0], a[ks][2]);
        e2m1x8_to_e4m3(words[ks >> 1][(ks & 1) * 2 + 1], lo1, hi1, a[ks][1], a[ks][3]);
      }
    }
  };

  // Load + convert group `gi` of the current item into `gr` (waits for the stage when gi starts a chunk).
  uint64_t flags_lo = 0;  // the current item's flags of groups 0..63 (K <= 8192 needs no other word)
  bool first_wait = kTimeline;  // timeline: the first stage's landing not yet marked
  // gin: the group's index in its stage (gi % G), a constant at every call site. kMayWide: the item has wide
  // groups (else the flag test, the table selects and the slow path compile away).
  auto load_group = [&](int gi, int gin, const uint64_t* flags_row, GroupRegs& gr, auto may_wide) {
    constexpr bool kMayWide = decltype(may_wide)::value;
    if (gin == 0) {
      mbar_wait(&full_bar[ld_stage], ld_phase);
      // The copiers' barrier completes only after the full one, but the TMA's bytes are promised visible to the
      // threads that wait on the full barrier itself, so the consumers wait on both.
      if constexpr (C::kFragSa) mbar_wait(&fs_bar[ld_stage], ld_phase);
      __syncwarp();  // reconverge after the spin: wgmma is .sync.aligned
      jitter_warp(3);
      if (kTimeline && first_wait) {
        if (threadIdx.x == 0) timeline_mark(kTlFirstLanded);
        first_wait = false;
      }
    }
    gr.stage = ld_stage;
    gr.gin = gin;
#if MOESERVE_W4A8_PROBE & 64
    gr.gi = gi;
    stage_check(gr, 0);
#endif
    gr.wide = kMayWide && (((gi < 64 ? flags_lo : flags_row[gi >> 6]) >> (gi & 63)) & 1);
    const uint32_t chunk = chunk_addr(gr);
    // The thread's values of rows r0 and r0 + 8 all come from block t4 (the activation channel order): one table
    // each, base + u * step. (Wide groups convert again, block by block, in issue_group; this result goes unused.)
    const uint32_t u0 = lds_u8(chunk + pack::kChunkWeightBytes + 4 * r0 + t4);
    const uint32_t u1 = lds_u8(chunk + pack::kChunkWeightBytes + 4 * (r0 + 8) + t4);
    convert_group(chunk, kLutLo0 + u0 * kLutLoStep, kLutHi0 + u0 * kLutHiStep, kLutLo0 + u1 * kLutLoStep,
                  kLutHi0 + u1 * kLutHiStep, gr.a);
    if (gin == G - 1) {
      if (++ld_stage == S) {
        ld_stage = 0;
        ld_phase ^= 1;
      }
    }
  };

  auto act_desc_lo = [&](const GroupRegs& gr) {
    return sw128_desc_lo(stages_addr + gr.stage * C::kStageBytes + gr.gin * BN * 128);
  };
  int sa_off = 0;  // the current tile's first token inside the 16-byte-aligned scale box
  auto sa_ptr = [&](const GroupRegs& gr) {  // shared address of the group's first token scale (or fragment-order set)
    if constexpr (C::kFragSa) return stages_addr + gr.stage * C::kStageBytes + C::kFsOffset + 4 * gr.gin * C::kFsGroup;
    else return stages_addr + gr.stage * C::kStageBytes + C::kActBytes + 4 * (gr.gin * C::kSaPitch + sa_off);
  };

  // acc += tmp * s_row * sa[token]: s_row = 2^(e_j - R) for a wide group's block (rows r0, r0 + 8), 1 for fast
  // groups (the row factor is applied in the epilogue; the compiler drops the exact multiplications by 1).
  // The thread's first scale address is hidden from the compiler (opaque_u32), so the loads take immediate offsets
  // 32 i and 32 i + 4. Written as sa + 4 (8 i + 2 t4), it was folded to sa + (8 t4 | 32 i), two integer ops per
  // column pair (an OR and an add per i, 32 per group) that the loads' offsets can absorb.
  // h: the sub-tile (tokens h SUB ..), a constant at every call site; w: its width (SUB, or less for a tile's last).
  // Returns the bits of what it loaded from the stage OR-ed together, for the stage's release (mbar_arrive_after).
  auto promote_scaled = [&](uint32_t sa, float s0, float s1, int h, auto w) -> uint32_t {
    constexpr int W = decltype(w)::value;
    if constexpr ((kProbe & 1) != 0) {
      probe_sink += __float_as_uint(tmp[0]);
      return 0u;
    }
    uint32_t loaded = __float_as_uint(s0) | __float_as_uint(s1);
    float* a = acc + h * (SUB / 2);
    if constexpr (C::kFragSa) {  // sa: the group's fragment-order scales
      static_assert(W % 16 == 0, "whole quads of scales");
      const uint32_t st = opaque_u32(sa + 4 * (h * C::kFsSub + t4 * C::kFsRow));
#pragma unroll
      for (int i2 = 0; i2 < W / 16; ++i2) {
        const uint4 q = (kProbe & 8) != 0 ? make_uint4(__float_as_uint(probe_one), __float_as_uint(probe_one),
                                                       __float_as_uint(probe_one), __float_as_uint(probe_one))
                                          : lds128(st + 16 * i2);
        loaded |= q.x;  // one register of the load is enough: its four arrive together
        const float sc[4] = {__uint_as_float(q.x), __uint_as_float(q.y), __uint_as_float(q.z), __uint_as_float(q.w)};
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int i = 2 * i2 + k;
          a[4 * i + 0] = fmaf(tmp[4 * i + 0], s0 * sc[2 * k], a[4 * i + 0]);
          a[4 * i + 1] = fmaf(tmp[4 * i + 1], s0 * sc[2 * k + 1], a[4 * i + 1]);
          a[4 * i + 2] = fmaf(tmp[4 * i + 2], s1 * sc[2 * k], a[4 * i + 2]);
          a[4 * i + 3] = fmaf(tmp[4 * i + 3], s1 * sc[2 * k + 1], a[4 * i + 3]);
        }
      }
      return loaded;
    }
    const uint32_t st = opaque_u32(sa + 4 * h * SUB + 8 * t4);
#pragma unroll
    for (int i = 0; i < W / 8; ++i) {
      const float2 sc = (kProbe & 8) != 0 ? make_float2(probe_one, probe_one)
                                           : make_float2(lds_f32(st + 32 * i), lds_f32(st + 32 * i + 4));
      loaded |= __float_as_uint(sc.x) | __float_as_uint(sc.y);
      a[4 * i + 0] = fmaf(tmp[4 * i + 0], s0 * sc.x, a[4 * i + 0]);
      a[4 * i + 1] = fmaf(tmp[4 * i + 1], s0 * sc.y, a[4 * i + 1]);
      a[4 * i + 2] = fmaf(tmp[4 * i + 2], s1 * sc.x, a[4 * i + 2]);
      a[4 * i + 3] = fmaf(tmp[4 * i + 3], s1 * sc.y, a[4 * i + 3]);
    }
    return loaded;
  };
  auto promote = [&](uint32_t sa, int h, auto w) { return promote_scaled(sa, 1.0f, 1.0f, h, w); };
  uint32_t wide_loaded = 0;  // a wide group's promotions (in issue_group): what they loaded, for the release

  // The stage release: the warp's scale loads OR-ed (lane 0 arrives for the warp), the arrive dependent on them.
  auto arrive_release = [&](int stage, uint32_t loaded) {
    __syncwarp();
    const uint32_t warp_loaded = __reduce_or_sync(0xffffffffu, loaded);
    if (lane == 0 || p.every_thread_releases) mbar_arrive_after(&empty_bar[stage], warp_loaded, runtime_zero);
    __syncwarp();
  };
  int pending_stage = -1;    // kDeferRelease: the stage whose release waits for the next group's wgmma issue
  uint32_t pending_loaded = 0;
  auto flush_release = [&]() {
    if constexpr (kDeferRelease) {
      if (pending_stage >= 0) {
        arrive_release(pending_stage, pending_loaded);
        pending_stage = -1;
      }
    }
  };

  // Issue the group's MMAs. Fast groups: 4 async wgmmas (caller waits and promotes). Wide groups: each
  // 32-block on its own (converted again, a k-step at a time), waited and promoted here.
  // Sub-tile h's tokens start h SUB rows of 128 bytes into the group's activation tile (whole 8-row swizzle atoms).
  auto issue_group = [&](const GroupRegs& gr, int h, auto may_wide, auto w) {
    constexpr bool kMayWide = decltype(may_wide)::value;
    constexpr int W = decltype(w)::value;
    const uint32_t desc = act_desc_lo(gr) + h * SUB * 8;  // + 2 per k32 step (32 bytes)
    if (!kMayWide || !gr.wide) {
      jitter_warp(4);
      fence_operands(tmp);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        if constexpr ((kProbe & 4) == 0)
          wgmma::RsFp8<W>::mma(first_of<W / 2>(tmp), gr.a[ks], sw128_desc(desc + 2 * ks), ks > 0 ? 1 : 0);
        else  // the fragments stay used, so that their conversion is still done
          probe_sink ^= gr.a[ks][0] ^ gr.a[ks][1] ^ gr.a[ks][2] ^ gr.a[ks][3];
      wgmma_commit();
      flush_release();
    } else {
      // Block j at a time: the threads holding it (t4 == j) convert with u = 12, the others give zeros (-0.0), and
      // the group's four k-steps accumulate block j alone, promoted with its 2^(e_j - R). Converted again for each
      // block and k-step, into one fragment set waited on at once: a second full set here made ptxas spill in the
      // 4-CTA decode configs, whose fast path then ran slower (bn8_wg1_g2_s4_m4, V4-Pro W13 at one token: 54.5
      // against 51.7 us on the H200).
#pragma unroll 1
      for (int j = 0; j < 4; ++j) {
        const uint32_t lo = t4 == j ? kLutLo0 + 12u * kLutLoStep : 0u, hi = t4 == j ? kLutHi0 + 12u * kLutHiStep : 0u;
        const uint32_t words = chunk_addr(gr) + tid * 16;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {  // one k-step at a time: two words and one fragment set live
          const uint2 q = lds64(words + (ks >> 1) * 2048 + (ks & 1) * 8);
          uint32_t f[4];
          e2m1x8_to_e4m3(q.x, lo, hi, f[0], f[2]);
          e2m1x8_to_e4m3(q.y, lo, hi, f[1], f[3]);
          fence_operands(tmp);
          wgmma_fence();
          wgmma::RsFp8<W>::mma(first_of<W / 2>(tmp), f, sw128_desc(desc + 2 * ks), ks > 0 ? 1 : 0);
          wgmma_commit();
          wgmma_wait_all();
        }
        fence_operands(tmp);
        const uint32_t scales = chunk_addr(gr) + pack::kChunkWeightBytes + j;
        wide_loaded |=
            promote_scaled(sa_ptr(gr), pow2_rel(lds_u8(scales + 4 * r0)), pow2_rel(lds_u8(scales + 4 * (r0 + 8))), h, w);
      }
      flush_release();
    }
  };

  auto finish_group = [&](const GroupRegs& gr, int h, bool last_sub, auto may_wide, auto w) {
    constexpr bool kMayWide = decltype(may_wide)::value;
    wgmma_wait_all();
    fence_operands(tmp);
    uint32_t loaded = 0;  // what this group's promotion read from the stage
    if (!kMayWide || !gr.wide) {
      loaded = promote(sa_ptr(gr), h, w);
    } else {
      loaded = wide_loaded;
      wide_loaded = 0;
    }
#if MOESERVE_W4A8_PROBE & 64
    stage_check(gr, 1);
#endif
    if (last_sub && gr.gin == G - 1) {  // the stage's last group: activations, scales and weights all read
      jitter_warp(5);
      // The release waits for the warp's loads of the scales: the wgmmas' reads and the weights' (their fragments fed
      // the wgmmas) are complete after wgmma_wait_all, but ptxas issued the arrive between the promotion's scale
      // loads and the FFMAs that use them, and under compute-sanitizer initcheck on H100s a warp then read the next
      // chunk's token scales (moe-w4a8.md, fifty-ninth session).
      if constexpr (kDeferRelease) {
        pending_stage = rel_stage;
        pending_loaded = loaded;
      } else {
        arrive_release(rel_stage, loaded);
      }
      if (++rel_stage == S) rel_stage = 0;
    }
  };

  GroupRegs ga, gb;
  // Dynamic items: the first by the CTA's index (its flags and references load while its first stage lands), the
  // next ones' at their first stage (stage_item), -1 after the last.
  auto item_at_stage = [&]() {
    mbar_wait(&full_bar[ld_stage], ld_phase);
    __syncwarp();
    jitter_warp(6);
    return stage_item[ld_stage];
  };
  for (int it = int(blockIdx.x) < total_items ? int(blockIdx.x) : dynamic ? item_at_stage() : total_items;
       dynamic ? it >= 0 : it < total_items; it = dynamic ? item_at_stage() : it + int(gridDim.x)) {
    const WorkItem item = work_item<BN>(item_start, cnt, row_start, p.E, it);
    e = item.e;
    const int tt = item.tt;
    const int nb = item.nbt * WG + wg;
    const int m_valid = min(BN, cnt[e] - tt * BN);
#if MOESERVE_W4A8_PROBE & 64
    check_w = p.w + size_t(e) * p.expert_bytes + size_t(nb) * NG * pack::kChunkBytes;
    check_row0 = row_start[e] + tt * BN;
    check_item = it;
#endif
    // The tile's first row as row_start[e] + tt * BN, here and in the epilogue, not item.row0: with item.row0
    // ptxas 13.0 serialized bn128_wg2_g1_s4_pf's wgmmas (C7511, from 9ec575b until this was found). This form gives
    // every config the SASS it had before the WorkItem helper; the ptxas.wgmma_not_serialized test guards the rest.
    sa_off = (row_start[e] + tt * BN) & 3;
    const uint64_t* flags_row = p.flags + (size_t(e) * (p.N / 64) + nb) * p.flag_words;
    flags_lo = flags_row[0];
    // The rows' reference exponents for the epilogue, loaded now: at one work item per CTA (a decode token) the
    // load would otherwise be a memory latency after the last wgmma (Flash W13 at one token: 24.2 -> 21.8 us).
    const uint8_t* ref = p.w + size_t(e) * p.expert_bytes + p.ref_offset + size_t(nb) * 64;
    const uint32_t ref0 = ref[r0], ref1 = ref[r0 + 8];

#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

    // The main loop, compiled for items with wide groups and for the (usual) items without, for each count HA of
    // sub-tiles that hold tokens and each width TW of the last of them (a tile's empty sub-tiles issue nothing, its
    // last issues the columns its tokens need; a branch around the wgmmas instead would let ptxas serialize them).
    auto main_loop = [&](auto may_wide, auto n_sub, auto tail) {
      constexpr int HA = decltype(n_sub)::value, TW = decltype(tail)::value;
      // f(h, width) for the item's sub-tiles in order.
      auto each_sub = [&](auto&& f) {
        unroll<HA>([&](auto hc) {
          constexpr int h = decltype(hc)::value;
          f(h, std::integral_constant<int, h == HA - 1 ? TW : SUB>{});
        });
      };
      if constexpr (C::kPrefetch) {
        // Pairs of groups, so that each group's place in its stage is a constant (NG is even; G is 1 or 2).
        static_assert(G == 1 || G == 2, "pairs of groups");
        constexpr int kGinB = G == 2 ? 1 : 0;
        // The next group is converted under the first sub-tile's wgmmas.
        load_group(0, 0, flags_row, ga, may_wide);
        for (int gi = 0; gi < NG; gi += 2) {
          each_sub([&](int h, auto w) {
            issue_group(ga, h, may_wide, w);
            if (h == 0) load_group(gi + 1, kGinB, flags_row, gb, may_wide);
            finish_group(ga, h, h == HA - 1, may_wide, w);
          });
          each_sub([&](int h, auto w) {
            issue_group(gb, h, may_wide, w);
            if (h == 0 && gi + 2 < NG) load_group(gi + 2, 0, flags_row, ga, may_wide);
            finish_group(gb, h, h == HA - 1, may_wide, w);
          });
        }
      } else {
        for (int gi = 0; gi < NG; ++gi) {
          load_group(gi, gi % G, flags_row, ga, may_wide);
          each_sub([&](int h, auto w) {
            issue_group(ga, h, may_wide, w);
            finish_group(ga, h, h == HA - 1, may_wide, w);
          });
        }
      }
    };
    bool item_wide = flags_lo != 0;
    for (int w = 1; w < p.flag_words; ++w) item_wide |= flags_row[w] != 0;
    const int n_sub = (m_valid + SUB - 1) / SUB;
    const int tail_steps = (m_valid - (n_sub - 1) * SUB + C::kTailStep - 1) / C::kTailStep;
    with_count<H>(n_sub, [&](auto ns) {
      // Wide items (rare: the exact slow path) keep full sub-tiles, so that they add no instantiations per width.
      if (item_wide) {
        main_loop(std::true_type{}, ns, std::integral_constant<int, SUB>{});
      } else {
        with_count<C::kTails>(tail_steps, [&](auto ts) {
          main_loop(std::false_type{}, ns, std::integral_constant<int, decltype(ts)::value * C::kTailStep>{});
        });
      }
    });

    flush_release();  // the item's last stage
    if (kTimeline && threadIdx.x == 0) timeline_mark(kTlLoopDone);
    // Epilogue: the rows' 2^(R - 133) (exact). Eight token columns: each thread stores its own values (rows r0 and
    // r0 + 8 of tokens 2 t4 and 2 t4 + 1, 32-byte runs per token across a warp). Wider tiles: stage the 64 x BN
    // tile as [token][row] floats, then write whole token rows.
    const float rf0 = pow2_e8m0_minus6(ref0), rf1 = pow2_e8m0_minus6(ref1);
    const size_t row_base = size_t(row_start[e]) + size_t(tt) * BN;  // not item.row0 (above)
    const int col0 = nb * 64;
    if constexpr (BN == 8) {
      jitter_warp(7);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tok = 2 * t4 + h;
        if (tok >= m_valid) continue;
        const size_t at = (row_base + tok) * p.N + col0 + r0;
        const float v0 = acc[h] * rf0, v1 = acc[2 + h] * rf1;
        if (p.out_f32) {
          static_cast<float*>(p.y)[at] = v0;
          static_cast<float*>(p.y)[at + 8] = v1;
        } else {
          static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16_rn(v0);
          static_cast<__nv_bfloat16*>(p.y)[at + 8] = __float2bfloat16_rn(v1);
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < H; ++h) {  // one sub-tile at a time through the staging buffer
        const int h_valid = min(SUB, m_valid - h * SUB);
        if (h_valid <= 0) break;  // uniform across the warpgroup
        const float* a = acc + h * (SUB / 2);
        named_barrier(1 + wg, 128);
#pragma unroll
        for (int i = 0; i < SUB / 8; ++i) {
          const int c0 = 8 * i + 2 * t4;
          stage_out[c0 * C::kStagePitch + r0] = a[4 * i + 0] * rf0;
          stage_out[(c0 + 1) * C::kStagePitch + r0] = a[4 * i + 1] * rf0;
          stage_out[c0 * C::kStagePitch + r0 + 8] = a[4 * i + 2] * rf1;
          stage_out[(c0 + 1) * C::kStagePitch + r0 + 8] = a[4 * i + 3] * rf1;
        }
        named_barrier(1 + wg, 128);
        const size_t h_base = row_base + size_t(h) * SUB;
        if (p.out_f32) {
          // 16 threads x 4 floats per token row, 8 token rows per pass.
          for (int tok = tid / 16; tok < h_valid; tok += 8) {
            const int c = (tid % 16) * 4;
            const float4 v = *reinterpret_cast<const float4*>(stage_out + tok * C::kStagePitch + c);
            *reinterpret_cast<float4*>(static_cast<float*>(p.y) + (h_base + tok) * p.N + col0 + c) = v;
          }
        } else {
          // 8 threads x 8 bf16 per token row, 16 token rows per pass.
          for (int tok = tid / 8; tok < h_valid; tok += 16) {
            const int c = (tid % 8) * 8;
            const float4 v0 = *reinterpret_cast<const float4*>(stage_out + tok * C::kStagePitch + c);
            const float4 v1 = *reinterpret_cast<const float4*>(stage_out + tok * C::kStagePitch + c + 4);
            __nv_bfloat162 b[4] = {__floats2bfloat162_rn(v0.x, v0.y), __floats2bfloat162_rn(v0.z, v0.w),
                                   __floats2bfloat162_rn(v1.x, v1.y), __floats2bfloat162_rn(v1.z, v1.w)};
            uint4 packed;
            std::memcpy(&packed, b, 16);
            *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.y) + (h_base + tok) * p.N + col0 + c) = packed;
          }
        }
      }
    }
    __syncwarp();  // the store loops diverge; the next item starts with .aligned wgmma instructions
  }
  if constexpr (kProbe != 0)
    if (p.E < 0) static_cast<uint32_t*>(p.y)[threadIdx.x] = probe_sink;  // never true; keeps the sink's work
  if (kTimeline && threadIdx.x == 0) timeline_mark(kTlEnd);
}

// ---------------------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------------------
bool make_maps(const MoeW4A8Input& in, int K, int bn, int g, CUtensorMap* ma, CUtensorMap* msa) {
  EncodeTiled enc = encode_fn();
  if (!enc) return false;
  {
    cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(in.rows)};
    cuuint64_t strides[1] = {cuuint64_t(K)};
    cuuint32_t box[2] = {128, cuuint32_t(bn)};
    cuuint32_t estr[2] = {1, 1};
    if (enc(ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(in.a), dims, strides, box, estr,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
  {
    cuuint64_t dims[2] = {cuuint64_t(in.sa_ld), cuuint64_t(K / 128)};
    cuuint64_t strides[1] = {cuuint64_t(in.sa_ld) * 4};
    cuuint32_t box[2] = {cuuint32_t(bn + 4), cuuint32_t(g)};  // Cfg::kSaPitch
    cuuint32_t estr[2] = {1, 1};
    if (enc(msa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(in.sa), dims, strides, box, estr,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
  return true;
}

struct Launcher {
  MoeW4A8Config info;
  cudaError_t (*launch)(const Params&, const MoeW4A8Input&, cudaStream_t);
};

template <class C>
cudaError_t launch_cfg(const Params& p, const MoeW4A8Input& in, cudaStream_t stream) {
  static int grid = 0;
  static std::once_flag once;
  static cudaError_t setup_err = cudaSuccess;
  std::call_once(once, [] {
    setup_err = cudaFuncSetAttribute(moe_w4a8_gemm_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     C::kSmemBytes);
    if (setup_err != cudaSuccess) return;
    int dev = 0, sms = 0, per_sm = 0;
    setup_err = cudaGetDevice(&dev);
    if (setup_err == cudaSuccess) setup_err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (setup_err == cudaSuccess)
      setup_err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, moe_w4a8_gemm_kernel<C>, C::kThreads,
                                                                C::kSmemBytes);
    if (setup_err == cudaSuccess && per_sm < 1) setup_err = cudaErrorInvalidConfiguration;
    grid = sms * per_sm;
  });
  if (setup_err != cudaSuccess) return setup_err;
  CUtensorMap ma, msa;
  if (!make_maps(in, p.K, C::BN, C::G, &ma, &msa)) return cudaErrorInvalidValue;
  return dev::launch(moe_w4a8_gemm_kernel<C>, dim3(grid), dim3(C::kThreads), C::kSmemBytes, stream, ma, msa, p);
}

template <class C>
constexpr Launcher make_launcher(const char* name) {
  return Launcher{{C::BN, C::WG, C::G, C::S, C::MINB, name}, &launch_cfg<C>};
}

// The tuning space. Small-token configs use one consumer warpgroup and several CTAs per SM (finer work items
// for decode); large ones two warpgroups sharing the token tile.
const Launcher kLaunchers[] = {
    make_launcher<Cfg<8, 1, 2, 5, 3>>("bn8_wg1_g2_s5"),    make_launcher<Cfg<16, 1, 2, 4, 3>>("bn16_wg1_g2_s4"),
    make_launcher<Cfg<32, 1, 2, 5, 2>>("bn32_wg1_g2_s5"),  make_launcher<Cfg<16, 2, 2, 8, 1>>("bn16_wg2_g2_s8"),
    make_launcher<Cfg<32, 2, 2, 7, 1>>("bn32_wg2_g2_s7"),  make_launcher<Cfg<64, 2, 1, 8, 1>>("bn64_wg2_g1_s8"),
    // Prefill: 128 tokens, the next group converted during the current wgmmas (without that, the eleventh
    // session's sweep measured every prefill shape 8-23 % slower).
    make_launcher<Cfg<128, 2, 1, 5, 1, true>>("bn128_wg2_g1_s5_pf"),
    make_launcher<Cfg<128, 2, 1, 4, 1, true>>("bn128_wg2_g1_s4_pf"),
    // Other token tiles for prefill (twentieth session's sweep, moe-w4a8.md): 96 for ~64-96 rows per expert (V4-Pro
    // at 4K tokens: 8-16 % faster than 128 or 64), 160 spreads each group's conversion over more tokens (V4-Flash W2
    // at 32K: 5 %). 192 tokens without the second fragment set spilled and never won; not kept.
    make_launcher<Cfg<96, 2, 1, 5, 1, true>>("bn96_wg2_g1_s5_pf"),
    // (A 96-token tile with 7 stages, 61 KB of weights in flight, was never picked by the H100's or the H200's
    // sweeps; dropped in the sixty-third session, moe-w4a8.md.)
    make_launcher<Cfg<160, 2, 1, 4, 1, true>>("bn160_wg2_g1_s4_pf"),
    // 192 tokens as two sub-tiles of 96 that share each group's conversion (14 % fewer instructions than 128-token
    // tiles; a tile's empty second sub-tile issues nothing): V4-Pro from 32K tokens (thirty-ninth session,
    // moe-w4a8.md).
    make_launcher<Cfg<192, 2, 1, 4, 1, true, 96>>("bn192x96_wg2_g1_s4_pf"),
    // More warps in flight per SM for decode (ncu: 21 % occupancy at 3 CTAs of one consumer warpgroup).
    // (5 CTAs of bn8_wg1 would need <= 72 registers and spill.)
    make_launcher<Cfg<8, 1, 2, 4, 4>>("bn8_wg1_g2_s4_m4"), make_launcher<Cfg<8, 2, 2, 4, 2>>("bn8_wg2_g2_s4"),
    make_launcher<Cfg<16, 1, 2, 3, 4>>("bn16_wg1_g2_s3_m4"),
};
constexpr int kNumConfigs = int(sizeof(kLaunchers) / sizeof(kLaunchers[0]));

#if MOESERVE_W4A8_PROBE & 64
// The stage check's counts of the launch just made (the stream synchronized; nothing while it is captured), reset.
void print_stage_check(const char* config, cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) return;
  unsigned long long c[6] = {};
  if (cudaStreamSynchronize(stream) != cudaSuccess || cudaMemcpyFromSymbol(c, g_stage_check, sizeof c) != cudaSuccess)
    return;
  std::fprintf(stderr,
               "[w4a8 stage check] %s: %llu checks; threads that found a difference at the load: weights %llu, activations %llu; "
               "at the finish: weights %llu, activations %llu; first: block %llu item %llu group %llu at %s\n",
               config, c[0], c[1], c[2], c[3], c[4], c[5] >> 40, (c[5] >> 8) & 0xffffffffull, (c[5] >> 1) & 127,
               (c[5] & 1) ? "finish" : "load");
  const unsigned long long zeros[6] = {};
  cudaMemcpyToSymbol(g_stage_check, zeros, sizeof zeros);
}
#endif

// MOESERVE_W4A8_EVERY_THREAD_RELEASES=1: MoeW4A8Chain::every_thread_releases for every launch (sanitizer runs).
bool every_thread_releases_everywhere() {
  static const bool on = env_is("MOESERVE_W4A8_EVERY_THREAD_RELEASES", "1");
  return on;
}

cudaError_t run_gemm(const MoeW4A8Weights& w, const MoeW4A8Input& in, const int* counts, int cap, void* y,
                     MoeOutType out, int slots, int config, cudaStream_t stream, const MoeW4A8Chain& chain,
                     MoeW4A8Split split) {
  if (w.E <= 0 || w.E > kMaxExperts || w.N % 128 != 0 || w.K % 256 != 0 || !w.packed || !w.wide_flags ||
      !in.a || !in.sa || !counts || !y || in.rows <= 0 || in.sa_ld < in.rows || in.sa_ld % 4 != 0 ||
      reinterpret_cast<uintptr_t>(in.a) % 16 != 0 || reinterpret_cast<uintptr_t>(in.sa) % 16 != 0)
    return cudaErrorInvalidValue;
  if (config < 0) {
    config = moe_w4a8_pick_config(w.E, w.N, w.K, slots);
    if (split.config < 0) split = moe_w4a8_pick_split(w.E, w.N, w.K, slots);
  }
  if (config < 0 || config >= kNumConfigs) return cudaErrorInvalidValue;
  if (!moe_w4a8_config_fits(config, w.N, w.K)) return cudaErrorInvalidValue;
  if (split.config >= 0 && (split.config >= kNumConfigs || split.rows < 0 || !moe_w4a8_config_fits(split.config, w.N, w.K)))
    return cudaErrorInvalidValue;
  Params p{};
  p.w = w.packed;
  p.flags = w.wide_flags;
  p.counts = counts;
  p.y = y;
  p.expert_bytes = pack::moe_w4a8_packed_expert_bytes(w.N, w.K);
  p.ref_offset = pack::moe_w4a8_row_ref_offset(w.N, w.K);
  p.E = w.E;
  p.N = w.N;
  p.K = w.K;
  p.cap = cap;
  p.flag_words = pack::moe_w4a8_flag_words(w.K);
  p.out_f32 = out == MoeOutType::F32 ? 1 : 0;
  p.counts_settled = chain.counts_settled || chain.settled_ids ? 1 : 0;
  if (chain.settled_ids) {
    if (cap > 0) return cudaErrorInvalidValue;  // the masked layout's rows do not follow from the ids alone
    p.settled_ids = chain.settled_ids;
    p.id_slots = in.rows;
  }
  if (chain.prefetch_next && chain.prefix_bytes > 0) {
    const MoeW4A8Weights& nx = *chain.prefetch_next;
    const uint32_t pitch = uint32_t(nx.K / pack::kPackK) * pack::kChunkBytes;
    if (!nx.packed || nx.E != w.E || nx.N % pack::kPackRows != 0 || nx.K % pack::kPackK != 0 ||
        chain.prefix_bytes % 16 != 0 || chain.prefix_bytes > pitch)
      return cudaErrorInvalidValue;
    p.pf_w = nx.packed;
    p.pf_expert_bytes = pack::moe_w4a8_packed_expert_bytes(nx.N, nx.K);
    p.pf_pitch = pitch;
    p.pf_blocks = nx.N / pack::kPackRows;
    p.pf_prefix = chain.prefix_bytes;
  }
  p.rows_lo = 0;
  p.rows_hi = INT_MAX;
  p.item_counter = chain.item_counter;
  // The stage release: after __syncwarp, lane 0 arrives for its warp (the mbarrier arrive releasing what __syncwarp
  // ordered before it), or with MoeW4A8Chain::every_thread_releases (MOESERVE_W4A8_EVERY_THREAD_RELEASES=1) every
  // consumer thread arrives. racecheck reports WAR hazards on the weights' bulk copies in the lane-0 form and none in
  // the other (fifty-sixth section of moe-w4a8.md). The wrong outputs initcheck gave in the 8-token configs in both
  // forms came from the scale loads the arrive did not wait for (fixed by mbar_arrive_after; fifty-ninth section),
  // not from the form: lane 0 is the default everywhere (the other form made V4-Pro 4K prefill 5-7 % slower on an
  // H100; level in decode).
  p.every_thread_releases = chain.every_thread_releases || every_thread_releases_everywhere() ? 1 : 0;
#if MOESERVE_W4A8_PROBE & 64
  p.a = in.a;
  p.rows = in.rows;
#endif
  auto launch = [&](int cfg) {  // (and, in the stage-check probe build, print its counts)
    const cudaError_t err = kLaunchers[cfg].launch(p, in, stream);
#if MOESERVE_W4A8_PROBE & 64
    print_stage_check(kLaunchers[cfg].info.name, stream);
#endif
    return err;
  };
  if (split.config < 0) return launch(config);
  // The loaded experts first (few, long work items), then the many short items of the rest, which fill the tail.
  p.rows_lo = split.rows + 1;
  const cudaError_t err = launch(split.config);
  if (err != cudaSuccess) return err;
  p.rows_lo = 0;
  p.rows_hi = split.rows;
  return launch(config);
}

}  // namespace

int moe_w4a8_timeline(std::vector<uint64_t>* events) {
  events->clear();
#if MOESERVE_W4A8_PROBE & 16
  events->resize(size_t(kMoeW4A8TimelineCtas) * kMoeW4A8TimelineEvents);
  const size_t bytes = events->size() * sizeof(uint64_t);
  if (cudaMemcpyFromSymbol(events->data(), g_timeline, bytes) != cudaSuccess) return -1;
  std::vector<uint64_t> zeros(events->size(), 0);
  if (cudaMemcpyToSymbol(g_timeline, zeros.data(), bytes) != cudaSuccess) return -1;
  return kMoeW4A8TimelineCtas;
#else
  return 0;
#endif
}

int moe_w4a8_config_count() { return kNumConfigs; }
const MoeW4A8Config& moe_w4a8_config(int id) { return kLaunchers[id].info; }
unsigned moe_w4a8_prefetch_prefix(int N, int K, int slots, size_t budget) {
  if (N < pack::kPackRows || K < pack::kPackK || slots <= 0) return 0;
  const size_t pitch = size_t(K / pack::kPackK) * pack::kChunkBytes;
  const size_t per_block = budget / (size_t(slots) * size_t(N / pack::kPackRows));
  return unsigned(std::min(pitch, per_block) / 16 * 16);
}

bool moe_w4a8_config_fits(int id, int N, int K) {
  if (id < 0 || id >= kNumConfigs || N <= 0 || K <= 0 || N % 128 != 0 || K % 256 != 0) return false;
  const MoeW4A8Config& c = kLaunchers[id].info;
  return (K / 128) % c.groups_per_stage == 0 && N % (64 * c.warpgroups) == 0;
}

cudaError_t moe_grouped_gemm_w4a8_contiguous(const MoeW4A8Weights& w, const MoeW4A8Input& in, const int* counts,
                                             void* y, MoeOutType out, int slots, int config,
                                             cudaStream_t stream, const MoeW4A8Chain& chain,
                                             const MoeW4A8Split& split) {
  return run_gemm(w, in, counts, 0, y, out, slots, config, stream, chain, split);
}

cudaError_t moe_grouped_gemm_w4a8_masked(const MoeW4A8Weights& w, const MoeW4A8Input& in, const int* counts,
                                         int cap, void* y, MoeOutType out, int slots, int config,
                                         cudaStream_t stream, const MoeW4A8Chain& chain,
                                         const MoeW4A8Split& split) {
  if (cap <= 0 || int64_t(cap) * w.E > in.rows) return cudaErrorInvalidValue;
  return run_gemm(w, in, counts, cap, y, out, slots, config, stream, chain, split);
}

}  // namespace moeserve::cuda
