#pragma once
// What the planner needs to know about one device (one rank): how many bytes the runtime reports, plus the
// roofline figures the performance model and the docs quote. GPU presets come from presets/gpus/<name>.json
// (see presets.h); the engine may also build one from the live device (cudaMemGetInfo's total).
#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::planner {

struct DeviceSpec {
  std::string name;           // "h200", "h20-141gb", "cpu", ...
  std::string display_name;   // "NVIDIA H200 141GB (SXM)"
  bool is_cpu = false;        // the CPU reference engine: memory is host RAM given by an option
  int64_t memory_bytes = 0;   // total device memory as the runtime reports it (cudaMemGetInfo total)
  double hbm_bandwidth_gbs = 0;  // GB/s (1e9 bytes per second), peak
  double bf16_tflops = 0, fp8_tflops = 0, fp4_tflops = 0;  // dense tensor-core peaks; 0 = not supported
  std::string interconnect;      // "NVLink 4 (NVSwitch)"
  double interconnect_gbs = 0;   // GB/s per GPU
  int64_t gpus_per_node = 1;
  std::string memory_note;       // where memory_bytes comes from
  std::vector<std::string> sources;
};

// The CPU reference engine as a device: `memory_bytes` is the host memory the engine may use.
DeviceSpec cpu_device(int64_t memory_bytes);

}  // namespace moeserve::planner
