#pragma once
// The MOESERVE_* environment switches of A/B and sanitizer runs, read where each is decided: the kernels keep the
// answer in a function-local static (once per process), GpuModel's constructor in its options.
#include <cstdlib>
#include <cstring>

namespace moeserve {

// Whether the environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, value) == 0;
}

}  // namespace moeserve
