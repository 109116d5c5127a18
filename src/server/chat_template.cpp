#include "server/chat_template.h"

#include "core/error.h"

namespace moeserve::server {
namespace {

constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";
constexpr const char* kEndOfSentence = "<｜end▁of▁sentence｜>";
constexpr const char* kToolCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr const char* kToolCallsEnd = "<｜tool▁calls▁end｜>";
constexpr const char* kToolCallBegin = "<｜tool▁call▁begin｜>";
constexpr const char* kToolCallEnd = "<｜tool▁call▁end｜>";
constexpr const char* kToolSep = "<｜tool▁sep｜>";
constexpr const char* kToolOutputsBegin = "<｜tool▁outputs▁begin｜>";
constexpr const char* kToolOutputsEnd = "<｜tool▁outputs▁end｜>";
constexpr const char* kToolOutputBegin = "<｜tool▁output▁begin｜>";
constexpr const char* kToolOutputEnd = "<｜tool▁output▁end｜>";

const std::string& content_of(const ChatMessage& message, size_t index) {
  check(message.content.has_value(), "messages[{}].content: expected a string for a {} message", index, message.role);
  return *message.content;
}

void append_tool_call(const ToolCall& call, std::string& out) {
  out += kToolCallBegin;
  out += call.type;
  out += kToolSep;
  out += call.name;
  out += "\n```json\n";
  out += call.arguments;
  out += "\n```";
  out += kToolCallEnd;
}

}  // namespace

std::string render_deepseek_chat(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) {
  // The template's namespace variables.
  bool first_tool_call_done = false;  // ns.is_first
  bool in_tool_outputs = false;       // ns.is_tool
  bool first_tool_output = true;      // ns.is_output_first

  std::string out = options.bos_token;
  bool first_system = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "system") continue;
    if (!first_system) out += "\n\n";
    out += content_of(messages[i], i);
    first_system = false;
  }

  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "user") {
      in_tool_outputs = false;
      out += kUser;
      out += content_of(message, i);
    } else if (message.role == "assistant" && !message.content) {
      in_tool_outputs = false;
      for (const ToolCall& call : message.tool_calls) {
        if (!first_tool_call_done) {
          out += kAssistant;
          out += kToolCallsBegin;
          append_tool_call(call, out);
          first_tool_call_done = true;
        } else {
          out += '\n';
          append_tool_call(call, out);
          out += kToolCallsEnd;
          out += kEndOfSentence;
        }
      }
    } else if (message.role == "assistant") {
      if (in_tool_outputs) {
        out += kToolOutputsEnd;
        in_tool_outputs = false;
      } else {
        out += kAssistant;
      }
      out += *message.content;
      out += kEndOfSentence;
    } else if (message.role == "tool") {
      in_tool_outputs = true;
      if (first_tool_output) {
        out += kToolOutputsBegin;
        first_tool_output = false;
      } else {
        out += '\n';
      }
      out += kToolOutputBegin;
      out += content_of(message, i);
      out += kToolOutputEnd;
    }
    // Other roles render nothing in the template; chat_messages_from_json rejects them earlier.
  }
  if (in_tool_outputs) out += kToolOutputsEnd;
  if (options.add_generation_prompt && !in_tool_outputs) out += kAssistant;
  return out;
}

}  // namespace moeserve::server
