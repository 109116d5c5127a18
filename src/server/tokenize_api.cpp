#include "server/tokenize_api.h"

#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/json_field.h"
#include "server/request_json.h"

namespace moeserve::server {

using nlohmann::json;

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, const std::string& text, bool add_special_tokens) {
  try {
    return tokenizer.encode(text, add_special_tokens);
  } catch (const Error& e) {
    bad_request("prompt", e.what());
  }
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  ChatTemplateOptions options;
  options.bos_token = tokenizer.bos_token();
  options.add_generation_prompt = add_generation_prompt;
  std::string text;
  try {
    text = render_deepseek_chat(messages, options);
  } catch (const Error& e) {
    bad_request("messages", e.what());
  }
  return tokenizer.encode(text, /*add_special_tokens=*/false);
}

json tokenize_response(const json& body, const Tokenizer& tokenizer, int64_t max_model_len) {
  const json& prompt = json_field(body, "prompt");
  const json& messages = json_field(body, "messages");
  if (prompt.is_null() == messages.is_null())
    bad_request(prompt.is_null() ? "prompt" : "messages", "exactly one of 'prompt' and 'messages' is required");
  std::vector<int32_t> tokens;
  if (!prompt.is_null()) {
    if (!prompt.is_string()) bad_request("prompt", "'prompt' must be a string, got " + prompt.dump());
    tokens = encode_prompt(tokenizer, prompt.get<std::string>(), boolean(body, "add_special_tokens", true));
  } else {
    tokens = encode_chat(tokenizer, chat_messages(body), boolean(body, "add_generation_prompt", true));
  }
  json strs = nullptr;
  if (boolean(body, "return_token_strs", false)) {
    strs = json::array();
    for (int32_t id : tokens) strs.push_back(tokenizer.decode(std::span<const int32_t>(&id, 1)));
  }
  return json{{"count", tokens.size()}, {"max_model_len", max_model_len}, {"tokens", tokens}, {"token_strs", strs}};
}

json detokenize_response(const json& body, const Tokenizer& tokenizer) {
  const json& tokens = json_field(body, "tokens");
  if (!tokens.is_array()) bad_request("tokens", "'tokens' must be an array of token ids");
  const std::vector<int32_t> ids = token_ids(tokens, "tokens");
  for (size_t i = 0; i < ids.size(); ++i)
    if (!tokenizer.is_token(ids[i]))
      bad_request("tokens", "tokens[" + std::to_string(i) + "] is not a token id of this tokenizer, got " +
                                std::to_string(ids[i]));
  return json{{"prompt", tokenizer.decode(ids)}};
}

}  // namespace moeserve::server
