#pragma once
// What the GPU benchmarks share: the device or the reason they skip, the milliseconds of work enqueued on a stream
// between two events, and the microseconds per call of a chain of calls captured in one CUDA graph and replayed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gpu_ceilings.h"
#include "kernels/cuda/device.h"

namespace moeserve::bench {

// The running GPU's ceilings (bench/ceilings.json via src/bench/gpu_ceilings.h), loaded once; the first call prints
// which figures the percentages use, and says so when no entry names this GPU (the H200's then stand in).
inline const GpuCeilings& gpu_ceilings(const std::string& name) {
  static const CeilingsChoice choice = [&] {
    CeilingsChoice c = load_gpu_ceilings(name);
    std::printf("# %s\n", describe(c).c_str());
    return c;
  }();
  return choice.ceilings;
}

// The device to benchmark, or null after printing why the benchmark is skipped (no GPU, not sm_90).
inline const cuda::DeviceInfo* device_or_skip() {
  const cuda::DeviceInfo& info = cuda::device_info();
  if (info.available) {
    gpu_ceilings(info.name);
    return &info;
  }
  std::printf("skipped: %s\n", info.reason.c_str());
  return nullptr;
}

// Milliseconds of the work work() enqueues on st, between two events.
template <class F>
float elapsed_ms(cudaStream_t st, F work) {
  cudaEvent_t a, b;
  MOESERVE_CUDA_CHECK(cudaEventCreate(&a));
  MOESERVE_CUDA_CHECK(cudaEventCreate(&b));
  MOESERVE_CUDA_CHECK(cudaEventRecord(a, st));
  work();
  MOESERVE_CUDA_CHECK(cudaEventRecord(b, st));
  MOESERVE_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  MOESERVE_CUDA_CHECK(cudaEventDestroy(a));
  MOESERVE_CUDA_CHECK(cudaEventDestroy(b));
  return ms;
}

// Microseconds per call: enqueue(i) for i = 0 .. calls - 1 (each enqueuing its work on st) captured in one graph,
// launched once to warm up, then `replays` timed launches.
template <class F>
double graph_us_per_call(cudaStream_t st, int calls, int replays, F enqueue) {
  cudaGraph_t graph;
  MOESERVE_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) enqueue(i);
  MOESERVE_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  cudaGraphExec_t exec;
  MOESERVE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MOESERVE_CUDA_CHECK(cudaGraphLaunch(exec, st));  // warm-up
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(st));
  const float ms = elapsed_ms(st, [&] {
    for (int r = 0; r < replays; ++r) MOESERVE_CUDA_CHECK(cudaGraphLaunch(exec, st));
  });
  MOESERVE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MOESERVE_CUDA_CHECK(cudaGraphDestroy(graph));
  return double(ms) * 1000.0 / (double(replays) * calls);
}

// The items of a comma-separated argument, empty ones included ("" -> {""}, "1,,2" -> {"1", "", "2"}), for the
// benchmarks' list flags to check one by one.
inline std::vector<std::string> comma_items(const std::string& list) {
  std::vector<std::string> items;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    items.push_back(list.substr(i, j - i));
    i = j + 1;
  }
  return items;
}

// kernel<<<blocks, threads, smem, st>>>(args...), with programmatic stream serialization when pdl (the
// benchmarks' chains of dependent launches).
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), int blocks, int threads, size_t smem, bool pdl, cudaStream_t st,
                   Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  MOESERVE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, Params(args)...));
}

}  // namespace moeserve::bench
