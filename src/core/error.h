#pragma once
// Errors at boundaries are values with a message that names the field and the expectation.
// Inside the library they travel as moeserve::Error exceptions up to the boundary (CLI, HTTP),
// which turns them into an exit code or an HTTP error body. Nothing on the per-token hot path throws.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace moeserve {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void check(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace moeserve
