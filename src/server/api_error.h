#pragma once
// An OpenAI-style error: HTTP status plus {"error": {"message", "type", "param", "code"}}.
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moeserve::server {

class ApiError : public Error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = "")
      : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}
  int status() const { return status_; }
  nlohmann::json body() const;

 private:
  int status_;
  std::string type_, param_;
};

// 400 invalid_request_error naming `param`.
[[noreturn]] void bad_request(const std::string& param, const std::string& message);
nlohmann::json error_body(const std::string& type, const std::string& message, const std::string& param = "",
                          int status = 400);

}  // namespace moeserve::server
