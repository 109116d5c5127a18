#pragma once
// Parsing and validating the bodies of POST /v1/completions and /v1/chat/completions into what the engine
// needs. Every problem is a 400 ApiError naming the field (OpenAI's `param`) and the expectation.
// Supported: model, prompt (string, token-id array, or a one-element list of either), messages,
// max_tokens / max_completion_tokens, min_tokens, temperature, top_p, top_k, seed, stop (string or list), stop_token_ids,
// n (choices, each its own engine request), stream, stream_options.include_usage, ignore_eos, skip_special_tokens; presence/frequency penalties
// only at 0, logprobs (completions: a count; chat: logprobs + top_logprobs); the other fields that
// would change the answer are refused the same way, and unknown ones listed (server/request_fields.h).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/chat_message.h"

namespace moeserve::server {

enum class ApiKind { Completion, Chat };

inline constexpr int64_t kMaxChoices = 128;  // the most `n` a request may ask for (OpenAI's limit)

struct ParsedRequest {
  ApiKind kind = ApiKind::Completion;
  std::string model;
  std::optional<std::string> prompt_text;          // completions with a string prompt
  std::optional<std::vector<int32_t>> prompt_ids;  // completions with token ids
  std::vector<ChatMessage> messages;               // chat
  bool max_tokens_given = false;
  engine::GenerationParams params;
  bool stream = false;
  bool include_usage = false;
  int n = 1;  // choices
  bool echo = false;  // completions: the prompt before the output (and its logprobs, when logprobs are asked)
  std::vector<std::string> ignored_fields;  // top-level fields no API that moeserve follows defines (logged)
};

struct RequestDefaults {
  int64_t completion_max_tokens = 16;  // OpenAI's default for completions
  int64_t chat_max_tokens = 256;       // when a chat request gives none
};

// A request body as a JSON object (invalid UTF-8, invalid JSON or another JSON value -> 400).
nlohmann::json parse_json_object(const std::string& body);

// `body` is the raw request body (invalid JSON / invalid UTF-8 -> 400).
ParsedRequest parse_openai_request(ApiKind kind, const std::string& body, const RequestDefaults& defaults);

}  // namespace moeserve::server
