#include "server/api_error.h"

namespace moeserve::server {

nlohmann::json error_body(const std::string& type, const std::string& message, const std::string& param, int status) {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}};
  if (!param.empty()) e["param"] = param;
  return {{"error", e}};
}

nlohmann::json ApiError::body() const { return error_body(type_, what(), param_, status_); }

void bad_request(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", message, param);
}

}  // namespace moeserve::server
