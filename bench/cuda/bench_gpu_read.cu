// bench_gpu_read: what reading N bytes costs as one launch of a dependent chain, the floor under a one-row GEMV of
// N bytes of weights (issue 7's bar: ops of >= 8 MB at >= 60 % of the copy-bandwidth roofline at one row). Each kernel
// reads its whole buffer and folds it into one word per block; a chain of launches (PDL, each launch's buffer a
// different copy from a pool larger than the L2) is captured in a CUDA graph and replayed, as bench_gpu_ops times
// its ops. Kernels differ in how the reads are issued:
//   ldg U/thread, B/SM     every thread keeps U 16-byte loads in flight (B blocks of 256 threads per SM); the first
//                          U are issued before griddepcontrol.wait, as the streaming GEMV does with its first unit;
//   bulk S x C KB, B/SM    one thread per block issues bulk copies (cp.async.bulk) of C KB into S stages of shared
//                          memory, all S before the wait, refilling a stage when the block has read it;
//   gemv quads, 2/SM       the streaming GEMV's units (4 rows x 1 KB per warp, the next in flight while one is
//                          folded), by k step as the GEMV walks them or in memory order;
//   early / late           griddepcontrol.launch_dependents at the kernel's start (the next launch may become
//                          resident and issue its own reads while this one streams) or after the wait.
// The folded words are checked against the host's fold of the same data (a kernel that skipped bytes fails).
// Usage: bench_gpu_read [--sizes-mb LIST]
//   --sizes-mb   comma-separated buffer sizes in MB (1e6 bytes, 0.1-600), rounded down to whole 16 KB; default
//                4.2,8.4,16.8,33.6,67.1. The W4A8 MoE GEMM's one-token reads (six experts' MXFP4 weights and scales)
//                are 53.48 / 26.74 MB (V4-Flash W13 / W2) and 140.38 / 70.19 MB (V4-Pro W13 / W2).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "graph_timing.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device.h"
#include "kernels/cuda/hopper.cuh"

namespace {

using moeserve::bench::graph_us_per_call;
using moeserve::bench::launch_kernel;
using namespace moeserve::cuda::dev;
using namespace moeserve::cuda::hopper;

double roof_bw = 0;  // the running GPU's copy bandwidth (bench/ceilings.json), set in main
constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t fold(uint32_t acc, const uint4& v) { return acc ^ v.x ^ v.y ^ v.z ^ v.w; }

// out[blockIdx.x] = the xor of the block's threads' folds.
__device__ __forceinline__ void write_block_fold(uint32_t acc, uint32_t* out) {
  acc = __reduce_xor_sync(0xffffffffu, acc);
  __shared__ uint32_t warp_acc[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) acc ^= warp_acc[w];
    out[blockIdx.x] = acc;
  }
}

// Block b folds the 16-byte words i of src with i % gridDim.x == b ... (grid-stride over threads); out[b] is the
// xor of its threads' folds.
template <int U>
__global__ void __launch_bounds__(kThreads) ldg_read_kernel(const uint4* src, size_t n16, uint32_t* out, bool early) {
  const size_t stride = size_t(gridDim.x) * kThreads;
  size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x;
  uint4 v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) v[u] = i + u * stride < n16 ? __ldg(src + i + u * stride) : make_uint4(0, 0, 0, 0);
  pdl_begin(early);
  uint32_t acc = 0;
  for (;;) {
#pragma unroll
    for (int u = 0; u < U; ++u) acc = fold(acc, v[u]);
    i += U * stride;
    if (i >= n16) break;
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = i + u * stride < n16 ? __ldg(src + i + u * stride) : make_uint4(0, 0, 0, 0);
  }
  write_block_fold(acc, out);
}

// The streaming GEMV's read pattern (gemv_stream.cu, one warp per quad): rows of `row_bytes`, quads of 4 rows;
// warp w of the grid walks quads w, w + warps, ...; a unit is 4 KB, each lane's next unit loaded before it folds
// the current one. CONTIGUOUS false: a unit is the quad's k step ks, 1 KB of each of its 4 rows (the GEMV's
// order); true: a unit is 4 KB of the quad in memory order (one 4 KB row when row_bytes is 4096).
template <bool CONTIGUOUS>
__global__ void __launch_bounds__(kThreads) quad_read_kernel(const uint8_t* src, size_t bytes, int row_bytes,
                                                             uint32_t* out) {
  const int lane = threadIdx.x & 31;
  const size_t warps = size_t(gridDim.x) * (kThreads / 32);
  const size_t quad_bytes = size_t(4) * row_bytes;
  const size_t quads = bytes / quad_bytes;
  const int units = row_bytes / 1024;  // units per quad
  size_t q = size_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  int u = 0;
  auto load = [&](size_t q, int u, uint4 (&v)[8]) {
    const uint8_t* base = src + q * quad_bytes;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const size_t at = CONTIGUOUS ? size_t(u) * 4096 + size_t(j * 32 + lane) * 16
                                   : size_t(j / 2) * row_bytes + size_t(u) * 1024 + size_t((j % 2) * 32 + lane) * 16;
      v[j] = __ldg(reinterpret_cast<const uint4*>(base + at));
    }
  };
  uint4 cur[8], nxt[8];
  if (q < quads) load(q, u, cur);
  pdl_begin(false);
  uint32_t acc = 0;
  while (q < quads) {
    const int nu = u + 1 < units ? u + 1 : 0;
    const size_t nq = u + 1 < units ? q : q + warps;
    if (nq < quads) load(nq, nu, nxt);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = fold(acc, cur[j]);
    q = nq;
    u = nu;
#pragma unroll
    for (int j = 0; j < 8; ++j) cur[j] = nxt[j];
  }
  write_block_fold(acc, out);
}

constexpr int kMaxStages = 16;

// Block b folds the contiguous slice [b * slice, (b + 1) * slice) of src (bytes, a multiple of 16), copied in
// chunks of `chunk` bytes through `stages` stages of shared memory.
__global__ void __launch_bounds__(kThreads) bulk_read_kernel(const uint8_t* src, size_t bytes, size_t slice,
                                                             int chunk, int stages, uint32_t* out, bool early) {
  extern __shared__ __align__(128) uint8_t stage_mem[];
  __shared__ uint64_t full[kMaxStages];
  const size_t begin = size_t(blockIdx.x) * slice;
  const size_t end = begin + slice < bytes ? begin + slice : bytes;
  const int chunks = begin < end ? int((end - begin + chunk - 1) / chunk) : 0;
  auto issue = [&](int c) {
    const size_t at = begin + size_t(c) * chunk;
    const uint32_t n = uint32_t(end - at < size_t(chunk) ? end - at : chunk);
    mbar_arrive_expect_tx(&full[c % stages], n);
    bulk_load(stage_mem + size_t(c % stages) * chunk, src + at, n, &full[c % stages]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int c = 0; c < chunks && c < stages; ++c) issue(c);
  }
  pdl_begin(early);
  __syncthreads();
  uint32_t acc = 0;
  for (int c = 0; c < chunks; ++c) {
    mbar_wait(&full[c % stages], uint32_t(c / stages) & 1u);
    const size_t at = begin + size_t(c) * chunk;
    const int n16 = int((end - at < size_t(chunk) ? end - at : chunk) / 16);
    const uint32_t base = smem_addr(stage_mem + size_t(c % stages) * chunk);
    for (int i = threadIdx.x; i < n16; i += kThreads) acc = fold(acc, lds128(base + 16u * i));
    __syncthreads();  // every thread has read the stage
    if (threadIdx.x == 0 && c + stages < chunks) issue(c + stages);
  }
  write_block_fold(acc, out);
}

struct Variant {
  std::string name;
  int blocks_per_sm;
  int unroll;  // ldg: loads per thread in flight; 0: bulk; -1 / -2: the GEMV's quads, by k step / in memory order
  int stages, chunk_kb;
  bool early;
};

// The bytes a size in MB reads: whole quads of 4 rows of 4 KB.
size_t read_bytes(double mb) { return size_t(mb * 1e6) / 16384 * 16384; }

// The sizes of --sizes-mb, or exits with status 2 naming what is wrong.
std::vector<double> parse_sizes_mb(const std::string& list) {
  std::vector<double> out;
  for (const std::string& item : moeserve::bench::comma_items(list)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 0.1 && v <= 600)) {
      std::fprintf(stderr, "bench_gpu_read: --sizes-mb must be a comma-separated list of sizes in MB, each 0.1-600; "
                           "got '%s'\n", list.c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> sizes_mb = {4.2, 8.4, 16.8, 33.6, 67.1};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes-mb" && i + 1 < argc) {
      sizes_mb = parse_sizes_mb(argv[++i]);
    } else {
      std::fprintf(stderr, "bench_gpu_read: unknown argument '%s' (usage: bench_gpu_read [--sizes-mb LIST])\n",
                   a.c_str());
      return 2;
    }
  }
  const auto* dev_info = moeserve::bench::device_or_skip();
  if (!dev_info) return 0;
  const auto& info = *dev_info;
  const int sms = info.multiprocessors;
  roof_bw = moeserve::bench::gpu_ceilings(info.name).copy_bytes_per_s;
  std::printf("# bench_gpu_read on %s (%d SMs): one read of N bytes per launch, chains of dependent PDL launches in a "
              "CUDA graph over copies of > 512 MB; roofline N / %.2f TB/s\n",
              info.name.c_str(), sms, roof_bw / 1e12);
  cudaStream_t st;
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // At least 8 copies of the largest size, so that a chain's launches read from DRAM, not from L2.
  const size_t pool_bytes =
      std::max(size_t(640) << 20, size_t(8 * 1e6 * *std::max_element(sizes_mb.begin(), sizes_mb.end())) >> 20 << 20);
  uint8_t* pool;
  MOESERVE_CUDA_CHECK(cudaMalloc(&pool, pool_bytes));
  {  // deterministic contents, so the folds are checkable
    std::vector<uint32_t> h(pool_bytes / 4);
    uint32_t x = 2463534242u;
    for (auto& w : h) x ^= x << 13, x ^= x >> 17, x ^= x << 5, w = x;
    MOESERVE_CUDA_CHECK(cudaMemcpy(pool, h.data(), pool_bytes, cudaMemcpyHostToDevice));
  }
  uint32_t* out;
  MOESERVE_CUDA_CHECK(cudaMalloc(&out, size_t(4) * sms * sizeof(uint32_t)));
  MOESERVE_CUDA_CHECK(cudaFuncSetAttribute(bulk_read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));

  const std::vector<Variant> variants = {
      {"ldg 4/thread, 2/SM, late", 2, 4, 0, 0, false},   {"ldg 8/thread, 2/SM, late", 2, 8, 0, 0, false},
      {"ldg 8/thread, 2/SM, early", 2, 8, 0, 0, true},   {"ldg 8/thread, 1/SM, early", 1, 8, 0, 0, true},
      {"ldg 16/thread, 1/SM, early", 1, 16, 0, 0, true}, {"bulk 6 x 16 KB, 1/SM, late", 1, 0, 6, 16, false},
      {"bulk 6 x 16 KB, 1/SM, early", 1, 0, 6, 16, true}, {"bulk 3 x 32 KB, 1/SM, early", 1, 0, 3, 32, true},
      {"bulk 12 x 8 KB, 1/SM, early", 1, 0, 12, 8, true}, {"bulk 3 x 16 KB, 2/SM, early", 2, 0, 3, 16, true},
      {"bulk 4 x 24 KB, 1/SM, early", 1, 0, 4, 24, true}, {"bulk 3 x 32 KB, 1/SM, late", 1, 0, 3, 32, false},
      {"bulk 3 x 16 KB, 2/SM, late", 2, 0, 3, 16, false},
      // Near the W4A8 GEMM's one-token stage ring (bn8_wg1_g2_s5: 3 CTAs an SM, 5 stages of 2 x 4352 bytes).
      {"bulk 5 x 8 KB, 3/SM, late", 3, 0, 5, 8, false},   {"bulk 5 x 8 KB, 3/SM, early", 3, 0, 5, 8, true},
      {"gemv quads by k step, 2/SM, late", 2, -1, 0, 0, false}, {"gemv quads in order, 2/SM, late", 2, -2, 0, 0, false},
  };
  std::printf("| %-30s |", "variant");
  for (double mb : sizes_mb) std::printf(" %5.1f MB us (%%) |", mb);
  std::printf("\n");
  int failures = 0;
  std::vector<double> best_us(sizes_mb.size(), 1e30);
  std::vector<std::string> best_name(sizes_mb.size());
  for (const Variant& v : variants) {
    std::printf("| %-30s |", v.name.c_str());
    for (size_t si = 0; si < sizes_mb.size(); ++si) {
      const double mb = sizes_mb[si];
      const size_t bytes = read_bytes(mb);
      const int copies = int(pool_bytes / bytes);
      const int calls = copies < 64 ? copies : 64;
      const int blocks = v.blocks_per_sm * sms;
      const size_t slice = (bytes / 16 + blocks - 1) / blocks * 16;
      const size_t smem = size_t(v.stages) * v.chunk_kb * 1024;
      auto enqueue = [&](int i) {
        const uint8_t* src = pool + size_t(i % copies) * bytes;
        if (v.unroll < 0)  // rows of 4096 bytes (V4-Flash's FP8 expert W13); the sizes are whole quads (16 KB)
          launch_kernel(v.unroll == -1 ? quad_read_kernel<false> : quad_read_kernel<true>, blocks, kThreads, 0, true, st,
                        src, bytes, 4096, out);
        else if (v.unroll == 4)
          launch_kernel(ldg_read_kernel<4>, blocks, kThreads, 0, true, st, reinterpret_cast<const uint4*>(src), bytes / 16, out, v.early);
        else if (v.unroll == 8)
          launch_kernel(ldg_read_kernel<8>, blocks, kThreads, 0, true, st, reinterpret_cast<const uint4*>(src), bytes / 16, out, v.early);
        else if (v.unroll == 16)
          launch_kernel(ldg_read_kernel<16>, blocks, kThreads, 0, true, st, reinterpret_cast<const uint4*>(src), bytes / 16, out,
                     v.early);
        else
          launch_kernel(bulk_read_kernel, blocks, kThreads, smem, true, st, src, bytes, slice, v.chunk_kb * 1024, v.stages, out, v.early);
      };
      const double us = graph_us_per_call(st, calls, 20, enqueue);
      // Check: the last launch's folds xor-ed together equal the host's fold of that copy.
      std::vector<uint32_t> got(blocks), data(bytes / 4);
      MOESERVE_CUDA_CHECK(cudaMemcpy(got.data(), out, blocks * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      MOESERVE_CUDA_CHECK(cudaMemcpy(data.data(), pool + size_t((calls - 1) % copies) * bytes, bytes,
                                     cudaMemcpyDeviceToHost));
      uint32_t want = 0, have = 0;
      for (uint32_t w : data) want ^= w;
      for (uint32_t w : got) have ^= w;
      if (want != have) {
        std::fprintf(stderr, "%s at %.1f MB: fold %08x, expected %08x\n", v.name.c_str(), mb, have, want);
        ++failures;
      }
      std::printf(" %7.2f (%5.1f %%) |", us, 100.0 * (double(bytes) / roof_bw * 1e6) / us);
      if (us < best_us[si]) best_us[si] = us, best_name[si] = v.name;
    }
    std::printf("\n");
  }
  // The last line is device-check.sh's table row: each size's best time.
  for (size_t si = 0; si < sizes_mb.size(); ++si)
    std::printf("best at %.2f MB: %s\n", sizes_mb[si], best_name[si].c_str());
  std::printf("read floor (best of the variants, %% of %.2f TB/s):", roof_bw / 1e12);
  for (size_t si = 0; si < sizes_mb.size(); ++si) {
    const double bytes = double(read_bytes(sizes_mb[si]));
    std::printf(" %.2f MB %.2f us (%.1f %%);", sizes_mb[si], best_us[si], 100.0 * (bytes / roof_bw * 1e6) / best_us[si]);
  }
  std::printf(" %d fold mismatches\n", failures);
  MOESERVE_CUDA_CHECK(cudaFree(out));
  MOESERVE_CUDA_CHECK(cudaFree(pool));
  MOESERVE_CUDA_CHECK(cudaStreamDestroy(st));
  return failures ? 1 : 0;
}
