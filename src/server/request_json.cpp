#include "server/request_json.h"

#include "server/api_error.h"
#include "server/json_field.h"

namespace moeserve::server {

using nlohmann::json;

const json* field(const json& j, const char* name) {
  const json& v = json_field(j, name);
  return v.is_null() ? nullptr : &v;
}

double number(const json& j, const char* name, double lo, double hi, double fallback) {
  const json* v = field(j, name);
  if (!v) return fallback;
  if (!v->is_number()) bad_request(name, std::string("'") + name + "' must be a number, got " + v->dump());
  double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    bad_request(name, std::string("'") + name + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                          ", got " + v->dump());
  return x;
}

std::optional<int64_t> integer(const json& j, const char* name, int64_t lo) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad_request(name, std::string("'") + name + "' must be an integer, got " + v->dump());
  int64_t x = v->get<int64_t>();
  if (x < lo) bad_request(name, std::string("'") + name + "' must be >= " + std::to_string(lo) + ", got " + v->dump());
  return x;
}

bool boolean(const json& j, const char* name, bool fallback) {
  const json* v = field(j, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad_request(name, std::string("'") + name + "' must be true or false, got " + v->dump());
  return v->get<bool>();
}

std::vector<int32_t> token_ids(const json& v, const std::string& param) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() > INT32_MAX)
      bad_request(param, param + "[" + std::to_string(i) + "] must be a non-negative token id, got " + v[i].dump());
    ids.push_back(int32_t(v[i].get<int64_t>()));
  }
  return ids;
}

std::string requested_model(const json& j) {
  const json* m = field(j, "model");
  if (!m) return "";
  if (!m->is_string()) bad_request("model", "'model' must be a string");
  return m->get<std::string>();
}

std::vector<ChatMessage> chat_messages(const json& j) {
  const json* messages = field(j, "messages");
  if (!messages) bad_request("messages", "'messages' is required");
  if (!messages->is_array()) bad_request("messages", "'messages' must be an array of messages");
  if (messages->empty()) bad_request("messages", "'messages' must not be empty");
  try {
    return chat_messages_from_json(*messages);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    bad_request("messages", e.what());
  }
}

}  // namespace moeserve::server
