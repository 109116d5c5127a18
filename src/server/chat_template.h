#pragma once
// DeepSeek's conversation format, rendered natively: the Jinja chat_template of the DeepSeek-V3
// tokenizer_config.json, statement for statement (quirks included, so the text matches what HF
// renders for the same messages):
//   BOS, the system prompts joined by "\n\n", then per turn
//   user       <｜User｜>{content}
//   assistant  <｜Assistant｜>{content}<｜end▁of▁sentence｜>
//              or, with content null, tool calls:
//              <｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{type}<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>
//              and for each further call "\n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
//   tool       <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{content}<｜tool▁output▁end｜> (later ones "\n<｜tool▁output▁begin｜>...")
//              closed by <｜tool▁outputs▁end｜> before the next assistant content or at the end,
//   and <｜Assistant｜> when a generation prompt is asked for and the last turn is not a tool output.
// The template's state is conversation-wide: "first tool call" and "first tool output" are never reset.
#include <span>
#include <string>

#include "server/chat_message.h"

namespace moeserve::server {

struct ChatTemplateOptions {
  std::string bos_token;  // from tokenizer_config.json (Tokenizer::bos_token())
  bool add_generation_prompt = true;
};

// Throws moeserve::Error (naming messages[i]) for a message the template cannot render:
// a system, user or tool message without content.
std::string render_deepseek_chat(std::span<const ChatMessage> messages, const ChatTemplateOptions& options);

}  // namespace moeserve::server
