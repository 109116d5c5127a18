// bench_gpu_launch: what one dependent kernel boundary costs on this GPU, the floor under every latency-bound
// step of a batch-1 decode chain (docs/benchmarks/cuda-ops.md: ~20 dependent launches per V4-Flash layer).
// A chain of kChain launches, each depending on the one before, is captured in a CUDA graph and replayed; the
// time per launch is the chain's time / kChain. Variants:
//   plain / PDL        launched with and without programmatic dependent launch (each kernel waits with
//                      griddepcontrol.wait, then releases the next with griddepcontrol.launch_dependents);
//   hop                each kernel reads the value the one before wrote and writes it plus one (a true data
//                      dependency through memory, as in the decode chain), 1 block or 2 per SM;
//   flag hop           the same data dependency handed over through a flag instead of the boundary: each
//                      kernel releases the next at once, block 0 spins until the counter holds its link's value
//                      (acquire) and writes the next (release), and griddepcontrol.wait comes only at the end
//                      (what keeps the ordering transitive for later kernels): how much of the boundary is the
//                      grid's retirement rather than the data's way through memory;
//   in-kernel hops     the same number of dependent L2 round trips inside one kernel (what the boundary adds).
// The chain's final value is checked (kChain per replay): a wrong count fails the program.
// Usage: bench_gpu_launch
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "graph_timing.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device.h"

namespace {

using moeserve::bench::elapsed_ms;
using moeserve::bench::graph_us_per_call;
using moeserve::cuda::dev::pdl_begin;

constexpr int kChain = 200, kReplays = 5;

// Nothing but the PDL handshake.
__global__ void empty_kernel() { pdl_begin(); }

// Block 0's thread 0 reads the counter the previous kernel wrote and writes it plus one; every other block only
// takes part in the grid's completion (the boundary waits for all of them).
__global__ void hop_kernel(unsigned* counter) {
  pdl_begin();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned v = *reinterpret_cast<volatile unsigned*>(counter);
    *reinterpret_cast<volatile unsigned*>(counter) = v + 1;
  }
}

// Link `link` of a chain of `chain`: released at once; block 0's thread 0 waits for the counter to reach the
// link's value (the counter counts up through every replay, so link i of any replay sees value % chain == i),
// then writes the next; every thread waits for the previous kernel only at the end.
__global__ void flag_hop_kernel(unsigned* counter, int link, int chain) {
  moeserve::cuda::dev::pdl_release();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    } while (v % unsigned(chain) != unsigned(link));
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(counter), "r"(v + 1) : "memory");
  }
  moeserve::cuda::dev::pdl_wait();
}

// `hops` dependent round trips to L2 in one thread: a pointer chase through `next` (read past L1).
__global__ void chase_kernel(const unsigned* next, int hops, unsigned* out) {
  unsigned i = 0;
  for (int h = 0; h < hops; ++h) i = __ldcg(next + i);
  *out = i;
}

// kernel<<<blocks, 256, 0, st>>>(args...), with programmatic stream serialization when pdl.
template <class... Args>
void launch(void (*kernel)(Args...), int blocks, bool pdl, cudaStream_t st, Args... args) {
  moeserve::bench::launch_kernel(kernel, blocks, 256, 0, pdl, st, args...);
}

}  // namespace

int main() {
  const auto* dev_info = moeserve::bench::device_or_skip();
  if (!dev_info) return 0;
  const auto& info = *dev_info;
  const int sms = info.multiprocessors;
  std::printf("# bench_gpu_launch on %s (%d SMs): a chain of %d dependent launches in a CUDA graph, %d replays\n",
              info.name.c_str(), sms, kChain, kReplays);
  cudaStream_t st;
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned* counter;
  MOESERVE_CUDA_CHECK(cudaMalloc(&counter, sizeof(unsigned)));

  std::printf("| %-44s | %10s |\n", "chain", "us/launch");
  double pdl_hop_1 = 0, pdl_hop_wide = 0;
  for (bool pdl : {false, true}) {
    for (int blocks : {1, 2 * sms}) {
      const double us = graph_us_per_call(st, kChain, kReplays, [&](int) { launch(empty_kernel, blocks, pdl, st); });
      std::printf("| empty, %4d blocks of 256, %-17s | %10.2f |\n", blocks, pdl ? "PDL" : "plain", us);
    }
    for (int blocks : {1, 2 * sms}) {
      MOESERVE_CUDA_CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
      const double us =
          graph_us_per_call(st, kChain, kReplays, [&](int) { launch(hop_kernel, blocks, pdl, st, counter); });
      unsigned got = 0;
      MOESERVE_CUDA_CHECK(cudaMemcpy(&got, counter, sizeof(unsigned), cudaMemcpyDeviceToHost));
      const unsigned want = unsigned(kChain) * (kReplays + 1);
      if (got != want) {
        std::fprintf(stderr, "hop chain: counter %u, expected %u (a launch ran before its predecessor finished)\n", got,
                     want);
        return 1;
      }
      std::printf("| hop through memory, %4d blocks, %-11s | %10.2f |\n", blocks, pdl ? "PDL" : "plain", us);
      if (pdl) (blocks == 1 ? pdl_hop_1 : pdl_hop_wide) = us;
    }
  }

  double flag_hop_1 = 0;
  for (int blocks : {1, 2 * sms}) {
    MOESERVE_CUDA_CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
    const double us = graph_us_per_call(st, kChain, kReplays,
                                        [&](int i) { launch(flag_hop_kernel, blocks, true, st, counter, i, kChain); });
    unsigned got = 0;
    MOESERVE_CUDA_CHECK(cudaMemcpy(&got, counter, sizeof(unsigned), cudaMemcpyDeviceToHost));
    const unsigned want = unsigned(kChain) * (kReplays + 1);
    if (got != want) {
      std::fprintf(stderr, "flag hop chain: counter %u, expected %u\n", got, want);
      return 1;
    }
    std::printf("| hop through a flag, %4d blocks, PDL         | %10.2f |\n", blocks, us);
    if (blocks == 1) flag_hop_1 = us;
  }

  // The same number of dependent L2 round trips inside one kernel: a random cycle over 4 MB (in L2, past L1).
  const int words = 1 << 20;
  unsigned* next;
  MOESERVE_CUDA_CHECK(cudaMalloc(&next, words * sizeof(unsigned)));
  {
    unsigned* h = static_cast<unsigned*>(std::malloc(words * sizeof(unsigned)));
    unsigned* order = static_cast<unsigned*>(std::malloc(words * sizeof(unsigned)));
    for (int i = 0; i < words; ++i) order[i] = unsigned(i);
    unsigned long long x = 88172645463325252ull;
    for (int i = words - 1; i > 0; --i) {  // Fisher-Yates with xorshift
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const int j = int(x % unsigned(i + 1));
      const unsigned t = order[i];
      order[i] = order[j], order[j] = t;
    }
    for (int i = 0; i < words; ++i) h[order[i]] = order[(i + 1) % words];
    MOESERVE_CUDA_CHECK(cudaMemcpy(next, h, words * sizeof(unsigned), cudaMemcpyHostToDevice));
    std::free(h);
    std::free(order);
  }
  chase_kernel<<<1, 1, 0, st>>>(next, words, counter);  // warm the L2 with the whole cycle
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(st));
  const int hops = kChain * 20;
  const float ms = elapsed_ms(st, [&] { chase_kernel<<<1, 1, 0, st>>>(next, hops, counter); });
  const double hop_us = double(ms) * 1000.0 / hops;
  std::printf("| %-44s | %10.3f |\n", "one dependent L2 round trip inside a kernel", hop_us);
  std::printf("launch: dependent kernel boundary %.2f us (PDL, 1 block), %.2f us (PDL, %d blocks); "
              "handed over by a flag %.2f us (1 block); L2 round trip %.2f us\n",
              pdl_hop_1, pdl_hop_wide, 2 * sms, flag_hop_1, hop_us);
  MOESERVE_CUDA_CHECK(cudaFree(next));
  MOESERVE_CUDA_CHECK(cudaFree(counter));
  MOESERVE_CUDA_CHECK(cudaStreamDestroy(st));
  return 0;
}
