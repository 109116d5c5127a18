#pragma once
// Reading the fields of a request body, each problem a 400 ApiError naming the field: what the completion routes
// and the token endpoints share. Absent and null fields are the same.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_message.h"

namespace moeserve::server {

// The member `name`, or nullptr when absent or null.
const nlohmann::json* field(const nlohmann::json& j, const char* name);
// A number in [lo, hi], `fallback` when absent.
double number(const nlohmann::json& j, const char* name, double lo, double hi, double fallback);
// An integer >= lo, nullopt when absent.
std::optional<int64_t> integer(const nlohmann::json& j, const char* name, int64_t lo);
bool boolean(const nlohmann::json& j, const char* name, bool fallback);
// Non-negative int32 token ids from the array `v`, named `param` in errors.
std::vector<int32_t> token_ids(const nlohmann::json& v, const std::string& param);
// The request's `model`, "" when absent.
std::string requested_model(const nlohmann::json& j);
// The request's `messages`: required, a non-empty array of chat messages.
std::vector<ChatMessage> chat_messages(const nlohmann::json& j);

}  // namespace moeserve::server
