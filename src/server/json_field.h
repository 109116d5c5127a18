#pragma once
// Reading optional fields of large JSON documents without copying them (nlohmann's value() returns
// a copy, which for tokenizer.json's vocabulary costs more than parsing it).
#include <string_view>

#include "core/error.h"

#include <nlohmann/json.hpp>

namespace moeserve::server {

// The member `key` of `object`, or a null value if `object` is not an object or lacks it.
inline const nlohmann::json& json_field(const nlohmann::json& object, std::string_view key) {
  static const nlohmann::json null_value;
  if (!object.is_object()) return null_value;
  const auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

// A boolean member, `fallback` if absent or null; throws moeserve::Error naming `where`.`key` otherwise.
inline bool json_bool(const nlohmann::json& object, std::string_view key, bool fallback, std::string_view where) {
  const auto& value = json_field(object, key);
  if (value.is_null()) return fallback;
  check(value.is_boolean(), "{}.{}: expected a boolean", where, key);
  return value.get<bool>();
}

}  // namespace moeserve::server
