#pragma once
// Byte and token formatting shared by the plan report and the planner's error messages.
#include <cstdint>
#include <string>

namespace moeserve::planner {

std::string format_gib(int64_t bytes);       // "12.34 GiB"
std::string format_bytes(int64_t bytes);     // "584 B", "64.0 KiB", "4.56 MiB", "12.34 GiB"
std::string format_count(int64_t value);     // "1,234,567"
std::string format_context(int64_t tokens);  // "4K", "128K", "1M"

}  // namespace moeserve::planner
