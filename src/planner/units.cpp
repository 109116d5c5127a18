#include "planner/units.h"

#include <fmt/format.h>

namespace moeserve::planner {

std::string format_gib(int64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(1LL << 30)); }

std::string format_bytes(int64_t bytes) {
  const double b = double(bytes);
  if (bytes < 0) return "-" + format_bytes(-bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (1LL << 20)) return fmt::format("{:.1f} KiB", b / 1024);
  if (bytes < (1LL << 30)) return fmt::format("{:.2f} MiB", b / double(1LL << 20));
  return format_gib(bytes);
}

std::string format_count(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string format_context(int64_t tokens) {
  if (tokens >= (1LL << 20) && tokens % (1LL << 20) == 0) return fmt::format("{}M", tokens >> 20);
  if (tokens >= 1024 && tokens % 1024 == 0) return fmt::format("{}K", tokens >> 10);
  return std::to_string(tokens);
}

}  // namespace moeserve::planner
