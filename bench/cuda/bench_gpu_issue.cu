// bench_gpu_issue: how many results per clock an SM gives for the instructions a one-row FP8 GEMV spends per weight
// (docs/benchmarks/cuda-ops.md, twenty-third session: the CUDA-core gemv_small and a tensor-core version of it,
// which issues a third of the instructions, took the same time; both convert every weight with
// cvt.rn.f16x2.e4m3x2, so its rate may be what bounds them). Each thread runs 8 independent chains of one
// instruction (every result feeds the next one of its chain), one block of 1024 threads per SM; the cycles are the
// block's clock64 difference between two barriers. Printed: results per clock per SM (a packed x2 instruction counts
// one result per 32-bit register), against the 128 lanes per clock an SM issues; and each instruction's latency:
// one warp per SM running one chain, cycles per step.
// Usage: bench_gpu_issue
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "graph_timing.h"
#include "kernels/cuda/device.h"

namespace {

constexpr int kThreads = 1024, kChains = 8, kIters = 2048;

enum Op { kCvtE4m3ToF16x2, kCvtF16ToF32, kCvtF32x2ToE4m3x2, kCvtF32ToF16, kFfma, kLop3, kPrmt, kImad, kOps };
const char* const kNames[kOps] = {"cvt.rn.f16x2.e4m3x2 (F2FP unpack)", "cvt.f32.f16 (HADD2.F32)",
                                  "cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16.f32 (F2F)", "fma.rn.f32 (FFMA)",
                                  "lop3.b32", "prmt.b32", "mad.lo.u32 (IMAD)"};

template <int OP>
__device__ __forceinline__ uint32_t step(uint32_t r) {
  uint32_t d;
  if constexpr (OP == kCvtE4m3ToF16x2) {
    asm volatile("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.rn.f16x2.e4m3x2 %0, lo; }" : "=r"(d) : "r"(r));
  } else if constexpr (OP == kCvtF16ToF32) {
    asm volatile("{ .reg .b16 lo, hi; .reg .f32 f; mov.b32 {lo, hi}, %1; cvt.f32.f16 f, lo; mov.b32 %0, f; }"
                 : "=r"(d)
                 : "r"(r));
  } else if constexpr (OP == kCvtF32x2ToE4m3x2) {
    asm volatile("{ .reg .b16 p; .reg .f32 f; mov.b32 f, %1; cvt.rn.satfinite.e4m3x2.f32 p, f, f; cvt.u32.u16 %0, p; }"
                 : "=r"(d)
                 : "r"(r));
  } else if constexpr (OP == kCvtF32ToF16) {
    asm volatile("{ .reg .b16 h; .reg .f32 f; mov.b32 f, %1; cvt.rn.f16.f32 h, f; cvt.u32.u16 %0, h; }"
                 : "=r"(d)
                 : "r"(r));
  } else if constexpr (OP == kFfma) {
    asm volatile("{ .reg .f32 f; mov.b32 f, %1; fma.rn.f32 f, f, 0f3F7FFFFF, 0f3A800000; mov.b32 %0, f; }"
                 : "=r"(d)
                 : "r"(r));
  } else if constexpr (OP == kLop3) {
    asm volatile("lop3.b32 %0, %1, 0x77777777, 0x80808080, 0xEA;" : "=r"(d) : "r"(r));
  } else if constexpr (OP == kPrmt) {
    asm volatile("prmt.b32 %0, %1, 0x0C080400, 0x3210;" : "=r"(d) : "r"(r));
  } else {
    asm volatile("mad.lo.u32 %0, %1, 3, 1;" : "=r"(d) : "r"(r));
  }
  return d;
}

template <int OP, int CHAINS>
__global__ void __launch_bounds__(kThreads, 1) issue_kernel(long long* cycles, uint32_t* sink) {
  uint32_t r[CHAINS];
#pragma unroll
  for (int j = 0; j < CHAINS; ++j) r[j] = 0x38383838u + uint32_t(threadIdx.x * CHAINS + j);
  __syncthreads();
  const long long t0 = clock64();
#pragma unroll 4
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) r[j] = step<OP>(r[j]);
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  uint32_t acc = 0;
#pragma unroll
  for (int j = 0; j < CHAINS; ++j) acc ^= r[j];
  if (acc == 0x9E3779B9u) sink[0] = acc;  // keeps the chains live
}

// threads per SM and chains per thread: kThreads x kChains for the rate; one warp of one chain for the latency.
template <int OP, int CHAINS = kChains>
double results_per_clock(int sms, long long* cycles, uint32_t* sink, int threads = kThreads) {
  issue_kernel<OP, CHAINS><<<sms, threads>>>(cycles, sink);  // warm-up
  issue_kernel<OP, CHAINS><<<sms, threads>>>(cycles, sink);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<long long> c(static_cast<size_t>(sms), 0);
  MOESERVE_CUDA_CHECK(cudaMemcpy(c.data(), cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  double mean = 0;
  for (long long v : c) mean += double(v) / sms;
  return double(threads) * CHAINS * kIters / mean;
}

template <int OP>
void run_all(int sms, long long* cycles, uint32_t* sink) {
  if constexpr (OP < kOps) {
    const double r = results_per_clock<OP>(sms, cycles, sink);
    const double latency = 32.0 / results_per_clock<OP, 1>(sms, cycles, sink, 32);  // cycles per dependent step
    std::printf("| %-36s | %8.1f | %8.2f | %7.1f |\n", kNames[OP], r, r / 4.0, latency);
    run_all<OP + 1>(sms, cycles, sink);
  }
}

}  // namespace

int main() {
  const auto* info = moeserve::bench::device_or_skip();
  if (!info) return 0;
  const int sms = info->multiprocessors;
  long long* cycles = nullptr;
  uint32_t* sink = nullptr;
  MOESERVE_CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long) * sms));
  MOESERVE_CUDA_CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
  std::printf("# bench_gpu_issue on %s (%d SMs): %d threads per SM, %d independent chains each; results per clock\n",
              info->name.c_str(), sms, kThreads, kChains);
  std::printf("| instruction                          | per SM   | per SMSP | latency (cycles, one warp, one chain) |\n|---|---|---|---|\n");
  run_all<0>(sms, cycles, sink);
  MOESERVE_CUDA_CHECK(cudaFree(cycles));
  MOESERVE_CUDA_CHECK(cudaFree(sink));
  return 0;
}
