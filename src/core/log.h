#pragma once
// Logging goes through spdlog from .cpp files only (its fmt headers do not compile under nvcc C++20).
#include <spdlog/spdlog.h>

namespace moeserve {
// Called once by the CLI: level from --log-level or MOESERVE_LOG_LEVEL (default info); logs go to stderr.
void init_logging(const std::string& level);
}  // namespace moeserve
