#include "server/chat_message.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/json_field.h"
#include "server/utf8.h"

namespace moeserve::server {
namespace {

std::string read_string(const nlohmann::json& value, const std::string& where) {
  check(value.is_string(), "{}: expected a string", where);
  const auto& text = value.get_ref<const std::string&>();
  size_t bad = 0;
  check(utf8::is_valid(text, &bad), "{}: invalid UTF-8 at byte {}", where, bad);
  return text;
}

std::optional<std::string> read_content(const nlohmann::json& value, const std::string& where) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_array()) return read_string(value, where);
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    const auto part_where = fmt::format("{}[{}]", where, i);
    const auto& part = value[i];
    check(part.is_object() && json_field(part, "type") == "text",
          "{}: expected a {{\"type\": \"text\", \"text\": ...}} part (only text is supported)", part_where);
    if (i > 0) text += '\n';
    text += read_string(json_field(part, "text"), part_where + ".text");
  }
  return text;
}

ToolCall read_tool_call(const nlohmann::json& value, const std::string& where) {
  check(value.is_object(), "{}: expected an object", where);
  ToolCall call;
  const auto& type = json_field(value, "type");
  if (!type.is_null()) call.type = read_string(type, where + ".type");
  const auto& function = json_field(value, "function");
  check(function.is_object(), "{}.function: expected an object with \"name\" and \"arguments\"", where);
  call.name = read_string(json_field(function, "name"), where + ".function.name");
  const auto& arguments = json_field(function, "arguments");
  if (arguments.is_string()) {
    call.arguments = read_string(arguments, where + ".function.arguments");
  } else {
    check(!arguments.is_null(), "{}.function.arguments: expected a string or a JSON value", where);
    call.arguments = arguments.dump();
  }
  return call;
}

}  // namespace

std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages) {
  check(messages.is_array(), "messages: expected an array");
  std::vector<ChatMessage> result;
  result.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto where = fmt::format("messages[{}]", i);
    const auto& message = messages[i];
    check(message.is_object(), "{}: expected an object with \"role\" and \"content\"", where);
    ChatMessage out;
    out.role = read_string(json_field(message, "role"), where + ".role");
    check(out.role == "system" || out.role == "user" || out.role == "assistant" || out.role == "tool",
          "{}.role: expected system, user, assistant or tool, got \"{}\"", where, out.role);
    out.content = read_content(json_field(message, "content"), where + ".content");
    const auto& tool_calls = json_field(message, "tool_calls");
    if (!tool_calls.is_null()) {
      check(tool_calls.is_array(), "{}.tool_calls: expected an array", where);
      check(out.role == "assistant", "{}.tool_calls: only assistant messages call tools", where);
      for (size_t j = 0; j < tool_calls.size(); ++j)
        out.tool_calls.push_back(read_tool_call(tool_calls[j], fmt::format("{}.tool_calls[{}]", where, j)));
    }
    check(out.content.has_value() || out.role == "assistant", "{}.content: expected a string", where);
    result.push_back(std::move(out));
  }
  return result;
}

}  // namespace moeserve::server
