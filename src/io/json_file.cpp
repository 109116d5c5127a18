#include "io/json_file.h"

#include <exception>
#include <fstream>

#include "core/error.h"

namespace moeserve::io {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  check(bool(in), "{}: cannot open", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

}  // namespace moeserve::io
