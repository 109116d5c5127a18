#include "planner/device.h"

#include "core/error.h"

namespace moeserve::planner {

DeviceSpec cpu_device(int64_t memory_bytes) {
  check(memory_bytes > 0, "cpu device: memory must be a positive number of bytes, got {}", memory_bytes);
  DeviceSpec d;
  d.name = "cpu";
  d.display_name = "CPU reference engine (host memory)";
  d.is_cpu = true;
  d.memory_bytes = memory_bytes;
  d.memory_note = "given on the command line (--cpu-memory-gib)";
  return d;
}

}  // namespace moeserve::planner
