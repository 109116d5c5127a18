#pragma once
// Small parsers for CLI flag values.
#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::cli {

// "1,2,3" -> {1, 2, 3}; throws moeserve::Error naming `flag` on anything else.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

}  // namespace moeserve::cli
