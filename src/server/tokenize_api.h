#pragma once
// POST /tokenize and /detokenize in vLLM's shape, for clients that count tokens with the server's own tokenizer:
//   /tokenize   {"prompt": text, "add_special_tokens": true} or {"messages": [...], "add_generation_prompt": true},
//               optional "return_token_strs" -> {"count", "max_model_len", "tokens", "token_strs"}
//   /detokenize {"tokens": [ids]} -> {"prompt": text}
// Bad bodies are 400 ApiErrors naming the field (the model name is checked by the caller).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_message.h"
#include "server/tokenizer.h"

namespace moeserve::server {

// A prompt's token ids as the completion routes and /tokenize make them; a tokenizer or template error is a 400
// naming "prompt" or "messages".
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const std::string& text, bool add_special_tokens);
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt);

nlohmann::json tokenize_response(const nlohmann::json& body, const Tokenizer& tokenizer, int64_t max_model_len);
nlohmann::json detokenize_response(const nlohmann::json& body, const Tokenizer& tokenizer);

}  // namespace moeserve::server
