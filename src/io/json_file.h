#pragma once
// A JSON file read whole. Failures (moeserve::Error) name the file and, when given, what it is:
// "{path}: cannot open[ {what}]" or "{path}: [{what} is ]not valid JSON: ...".
#include <string>

#include <nlohmann/json.hpp>

namespace moeserve::io {

nlohmann::json read_json_file(const std::string& path, const std::string& what = "");

}  // namespace moeserve::io
