#include "server/tokenize_api.h"

#include "server/api_error.h"
#include "server/chat_message.h"
#include "server/chat_template.h"
#include "server/json_field.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

bool flag(const json& body, const char* name, bool fallback) {
  const json& v = json_field(body, name);
  if (v.is_null()) return fallback;
  if (!v.is_boolean()) bad_request(name, std::string("'") + name + "' must be true or false, got " + v.dump());
  return v.get<bool>();
}

}  // namespace

json tokenize_response(const json& body, const Tokenizer& tokenizer, int64_t max_model_len) {
  const json& prompt = json_field(body, "prompt");
  const json& messages = json_field(body, "messages");
  if (prompt.is_null() == messages.is_null())
    bad_request(prompt.is_null() ? "prompt" : "messages", "exactly one of 'prompt' and 'messages' is required");
  std::vector<int32_t> tokens;
  if (!prompt.is_null()) {
    if (!prompt.is_string()) bad_request("prompt", "'prompt' must be a string, got " + prompt.dump());
    try {
      tokens = tokenizer.encode(prompt.get<std::string>(), flag(body, "add_special_tokens", true));
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      bad_request("prompt", e.what());
    }
  } else {
    if (!messages.is_array() || messages.empty()) bad_request("messages", "'messages' must be a non-empty array");
    ChatTemplateOptions options;
    options.bos_token = tokenizer.bos_token();
    options.add_generation_prompt = flag(body, "add_generation_prompt", true);
    std::string text;
    try {
      text = render_deepseek_chat(chat_messages_from_json(messages), options);
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      bad_request("messages", e.what());
    }
    tokens = tokenizer.encode(text, /*add_special_tokens=*/false);
  }
  json strs = nullptr;
  if (flag(body, "return_token_strs", false)) {
    strs = json::array();
    for (int32_t id : tokens) strs.push_back(tokenizer.decode(std::span<const int32_t>(&id, 1)));
  }
  return json{{"count", tokens.size()}, {"max_model_len", max_model_len}, {"tokens", tokens}, {"token_strs", strs}};
}

json detokenize_response(const json& body, const Tokenizer& tokenizer) {
  const json& tokens = json_field(body, "tokens");
  if (!tokens.is_array()) bad_request("tokens", "'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX ||
        !tokenizer.is_token(int32_t(t.get<int64_t>())))
      bad_request("tokens", "tokens[" + std::to_string(i) + "] is not a token id of this tokenizer, got " + t.dump());
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return json{{"prompt", tokenizer.decode(ids)}};
}

}  // namespace moeserve::server
