#pragma once
// CUDA device discovery and error checks. Header is plain C++ so .cpp files can ask whether a GPU exists.
#include <cstddef>
#include <string>

namespace moeserve::cuda {

struct DeviceInfo {
  bool available = false;
  std::string reason;  // why not, when unavailable (no driver, no device, not sm_90)
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
};

// The first device, checked for compute capability 9.x (the kernels are built for sm_90a only).
const DeviceInfo& device_info();
inline bool available() { return device_info().available; }

// Throws moeserve::Error with `what` and the CUDA error string when `status` is not cudaSuccess.
void check_status(int status, const char* what, const char* file, int line);

}  // namespace moeserve::cuda

#define MOESERVE_CUDA_CHECK(call) ::moeserve::cuda::check_status(int(call), #call, __FILE__, __LINE__)
