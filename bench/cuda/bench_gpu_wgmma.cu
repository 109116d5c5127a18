// bench_gpu_wgmma: what the FP8 tensor cores take per instruction in the W4A8 kernel's shape (moe_w4a8_gemm.cu),
// wgmma.m64nNk32 e4m3 x e4m3 -> f32 with the A operand (weights) in registers and B (tokens) from shared memory,
// issued as that kernel issues them: groups of four chained wgmmas (one 128-k group), then a wait and an add of the
// group into an fp32 accumulator. For N = 8 (a decode tile of one to eight tokens) up to 128 (prefill) and for 1-4
// warpgroups per SM it prints the SM cycles per wgmma, and what that rate allows for MXFP4 weights: each wgmma takes
// 64 x 32 weights, 1088 bytes of the packed layout (1024 of e2m1 codes, 64 of scales and flags per 64 rows), so
// streaming the weights at the HBM's copy bandwidth (H200: 4.28 TB/s) needs one wgmma every 4.28e12 / 1088 / SMs
// seconds per SM.
// No memory traffic: the operands stay in registers and shared memory; B holds arbitrary e4m3 codes.
// Usage: bench_gpu_wgmma
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "graph_timing.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/wgmma_rs_fp8.cuh"

namespace {

using namespace moeserve::cuda;

double copy_bandwidth = 0;  // bytes/s: the running GPU's (bench/ceilings.json), set in main
constexpr double kBytesPerWgmma = 1088.0;   // 64 rows x 32 k of MXFP4 in kernels/cpu/moe_w4a8_pack.h's layout

// One warpgroup per block: `groups` rounds of 4 chained wgmmas + wait + fp32 add; thread 0 records its clock span.
template <int N>
__global__ void __launch_bounds__(128) wgmma_kernel(int groups, long long* cycles, float* sink) {
  __shared__ alignas(1024) uint8_t b[N * 128];  // the group's token tile: N rows of 128 k (128-byte swizzle)
  for (int i = threadIdx.x; i < N * 32; i += 128)
    reinterpret_cast<uint32_t*>(b)[i] = 0x30303030u | ((uint32_t(i) * 2654435761u) & 0x07070707u);
  __syncthreads();
  uint32_t a[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int j = 0; j < 4; ++j) a[ks][j] = 0x38383838u ^ ((threadIdx.x + 17u * ks + 5u * j) & 0x07070707u);
  float acc[N / 2], tmp[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  const uint32_t desc = hopper::sw128_desc_lo(hopper::smem_addr(b));
  const long long t0 = clock64();
  for (int g = 0; g < groups; ++g) {
    hopper::fence_operands(tmp);
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma::RsFp8<N>::mma(tmp, a[ks], hopper::sw128_desc(desc + 2 * ks), ks > 0 ? 1 : 0);
    hopper::wgmma_commit();
    hopper::wgmma_wait_all();
    hopper::fence_operands(tmp);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] += tmp[i];
  }
  const long long t1 = clock64();
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += acc[i];
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the work
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

struct Result {
  double cycles_per_wgmma;  // SM cycles per wgmma, all the SM's warpgroups together
  double ns_per_wgmma;
};

template <int N>
Result run(int sms, int per_sm, int groups, long long* cycles, float* sink, cudaStream_t st) {
  const int blocks = sms * per_sm;
  wgmma_kernel<N><<<blocks, 128, 0, st>>>(groups, cycles, sink);  // warm-up
  MOESERVE_CUDA_CHECK(cudaGetLastError());
  const float ms = moeserve::bench::elapsed_ms(st, [&] { wgmma_kernel<N><<<blocks, 128, 0, st>>>(groups, cycles, sink); });
  long long host[4096];
  MOESERVE_CUDA_CHECK(cudaMemcpy(host, cycles, sizeof(long long) * blocks, cudaMemcpyDeviceToHost));
  double mean = 0;
  for (int i = 0; i < blocks; ++i) mean += double(host[i]) / blocks;
  const double per_sm_wgmmas = double(per_sm) * groups * 4;
  return {mean / per_sm_wgmmas, double(ms) * 1e6 / per_sm_wgmmas};
}

template <int N>
void row(int sms, int groups, long long* cycles, float* sink, cudaStream_t st, double* decode_pct) {
  int resident = 0;  // blocks an SM holds at once (registers: N = 128 keeps 128 fp32 values per thread)
  MOESERVE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, wgmma_kernel<N>, 128, 0));
  for (int per_sm = 1; per_sm <= 4; ++per_sm) {
    if (per_sm > resident) {  // a second wave would count twice the work in one block's clock span
      std::printf("| m64n%-3dk32 RS | %d | not resident together (%d per SM) | | |\n", N, per_sm, resident);
      continue;
    }
    const Result r = run<N>(sms, per_sm, groups, cycles, sink, st);
    // The GPU's wgmma rate times the bytes each consumes, against the HBM copy bandwidth.
    const double pct = 100.0 * (sms / (r.ns_per_wgmma * 1e-9)) * kBytesPerWgmma / copy_bandwidth;
    std::printf("| m64n%-3dk32 RS | %d | %8.1f | %7.2f | %6.1f %% |\n", N, per_sm, r.cycles_per_wgmma, r.ns_per_wgmma,
                pct);
    if (N == 8 && per_sm == 3) *decode_pct = pct;  // the one-token config: 3 CTAs of one warpgroup per SM
  }
}

}  // namespace

int main() {
  const auto* dev_info = moeserve::bench::device_or_skip();
  if (!dev_info) return 0;
  const auto& info = *dev_info;
  const int sms = info.multiprocessors;
  copy_bandwidth = moeserve::bench::gpu_ceilings(info.name).copy_bytes_per_s;
  std::printf("# bench_gpu_wgmma on %s (%d SMs): FP8 wgmma, A in registers, groups of 4 chained k32 steps + wait\n",
              info.name.c_str(), sms);
  std::printf("# %% of %.2f TB/s: the rate at which these wgmmas would consume MXFP4 weights (%.0f bytes each)\n",
              copy_bandwidth / 1e12, kBytesPerWgmma);
  cudaStream_t st;
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  long long* cycles;
  float* sink;
  MOESERVE_CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long) * 4096));
  MOESERVE_CUDA_CHECK(cudaMalloc(&sink, sizeof(float) * 128));
  const int groups = 2048;
  double decode_pct = 0;
  std::printf("| %-13s | %s | %8s | %7s | %8s |\n", "wgmma", "WG/SM", "cyc/mma", "ns/mma", "of HBM");
  std::printf("|---|---|---|---|---|\n");
  row<8>(sms, groups, cycles, sink, st, &decode_pct);
  row<16>(sms, groups, cycles, sink, st, &decode_pct);
  row<32>(sms, groups, cycles, sink, st, &decode_pct);
  row<64>(sms, groups, cycles, sink, st, &decode_pct);
  row<128>(sms, groups, cycles, sink, st, &decode_pct);
  MOESERVE_CUDA_CHECK(cudaFree(cycles));
  MOESERVE_CUDA_CHECK(cudaFree(sink));
  std::printf("wgmma: m64n8k32 at 3 warpgroups per SM consumes MXFP4 weights at %.0f %% of %.2f TB/s\n", decode_pct,
              copy_bandwidth / 1e12);
  return 0;
}
