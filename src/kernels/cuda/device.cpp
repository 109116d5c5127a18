#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

#include <atomic>

#include "core/env.h"
#include "core/error.h"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {
std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> flag{!env_is("MOESERVE_PDL", "0")};
  return flag;
}
}  // namespace

bool pdl_enabled() { return pdl_flag().load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { pdl_flag().store(on, std::memory_order_relaxed); }

void check_status(int status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw Error(std::string("CUDA error '") + cudaGetErrorString(cudaError_t(status)) + "' in " + what + " at " +
              file + ":" + std::to_string(line));
}

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      d.reason = std::string("no CUDA driver/device: ") + cudaGetErrorString(status);
      cudaGetLastError();
      return d;
    }
    if (count == 0) {
      d.reason = "no CUDA device";
      return d;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
      d.reason = "cudaGetDeviceProperties failed";
      return d;
    }
    d.name = prop.name;
    d.major = prop.major;
    d.minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    d.total_memory = prop.totalGlobalMem;
    d.l2_bytes = size_t(prop.l2CacheSize);
    if (prop.major != 9) {
      d.reason = "unsupported GPU " + d.name + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
                 "): moeserve's kernels are built for Hopper (sm_90a)";
      return d;
    }
    d.available = true;
    return d;
  }();
  return info;
}

}  // namespace moeserve::cuda
