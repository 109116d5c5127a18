#include "io/json_file.h"

#include <exception>
#include <fstream>

#include "core/error.h"

namespace moeserve::io {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  check(bool(in), "{}: cannot open{}{}", path, what.empty() ? "" : " ", what);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: {}not valid JSON: {}", path, what.empty() ? "" : what + " is ", e.what());
  }
}

}  // namespace moeserve::io
