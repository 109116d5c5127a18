#pragma once
// Paths the tests use: the source tree (fixtures) and the built binary.
#include <string>

namespace moeserve::testing {
inline std::string source_dir() { return MOESERVE_SOURCE_DIR; }
inline std::string fixture(const std::string& relative) { return source_dir() + "/tests/fixtures/" + relative; }
inline std::string binary() { return MOESERVE_BINARY; }
}  // namespace moeserve::testing
