#pragma once
// JSON text of a response body or event.
#include <string>

#include <nlohmann/json.hpp>

namespace moeserve::server {

// Invalid UTF-8 in strings (say, echoed from a request) becomes U+FFFD instead of an exception.
inline std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One server-sent event carrying `j`.
inline std::string sse(const nlohmann::json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace moeserve::server
