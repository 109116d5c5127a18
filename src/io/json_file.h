#pragma once
// A JSON file read whole: "{path}: cannot open" or "{path}: not valid JSON: ..." on failure (moeserve::Error).
#include <string>

#include <nlohmann/json.hpp>

namespace moeserve::io {

nlohmann::json read_json_file(const std::string& path);

}  // namespace moeserve::io
