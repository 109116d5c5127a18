#pragma once
// A chat conversation as the template sees it: OpenAI-style messages reduced to what DeepSeek's
// conversation format renders.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace moeserve::server {

struct ToolCall {
  std::string type = "function";
  std::string name;
  std::string arguments;  // JSON text, as the model should see it
};

struct ChatMessage {
  std::string role;                    // system | user | assistant | tool
  std::optional<std::string> content;  // null for an assistant turn that only calls tools
  std::vector<ToolCall> tool_calls;
};

// Reads an OpenAI "messages" array. Content is a string, null, or an array of {"type": "text",
// "text": ...} parts (joined with "\n"); tool-call arguments are a string or a JSON value (serialized).
// Throws moeserve::Error naming the field, e.g. "messages[2].content: expected a string".
std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages);

}  // namespace moeserve::server
