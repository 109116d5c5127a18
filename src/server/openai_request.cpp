#include "server/openai_request.h"

#include <cmath>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/request_json.h"

namespace moeserve::server {

namespace {

using nlohmann::json;

void parse_prompt(const json& j, ParsedRequest& r) {
  const json* p = field(j, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return;
  }
  if (!p->is_array() || p->empty())
    bad_request("prompt", "'prompt' must be a string, an array of token ids, or a one-element list of either");
  if ((*p)[0].is_number()) {
    r.prompt_ids = token_ids(*p, "prompt");
    return;
  }
  if (p->size() != 1) bad_request("prompt", "several prompts in one request are not supported; send one per request");
  const json& only = (*p)[0];
  if (only.is_string()) {
    r.prompt_text = only.get<std::string>();
  } else if (only.is_array() && !only.empty()) {
    r.prompt_ids = token_ids(only, "prompt[0]");
  } else {
    bad_request("prompt", "'prompt[0]' must be a string or a non-empty array of token ids");
  }
}

}  // namespace

// Offset of the first byte that breaks UTF-8, or npos.
size_t invalid_utf8_at(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = uint8_t(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      uint8_t b = uint8_t(s[i + k]);
      if ((b & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3F);
    }
    bool overlong = (n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string::npos;
}

json parse_json_object(const std::string& body) {
  if (size_t at = invalid_utf8_at(body); at != std::string::npos)
    bad_request("", "the request body is not valid UTF-8 (byte " + std::to_string(at) + ")");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    bad_request("", std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad_request("", "the request body must be a JSON object");
  return j;
}

ParsedRequest parse_openai_request(ApiKind kind, const std::string& body, const RequestDefaults& defaults) {
  const json j = parse_json_object(body);
  ParsedRequest r;
  r.kind = kind;
  r.model = requested_model(j);
  if (kind == ApiKind::Completion) {
    parse_prompt(j, r);
  } else {
    r.messages = chat_messages(j);
  }

  auto max_tokens = integer(j, kind == ApiKind::Chat && field(j, "max_completion_tokens") ? "max_completion_tokens"
                                                                                         : "max_tokens", 1);
  r.max_tokens_given = max_tokens.has_value();
  r.params.max_tokens = max_tokens ? *max_tokens
                                   : (kind == ApiKind::Chat ? defaults.chat_max_tokens : defaults.completion_max_tokens);
  r.params.min_tokens = integer(j, "min_tokens", 0).value_or(0);
  if (r.params.min_tokens > r.params.max_tokens)
    bad_request("min_tokens", "'min_tokens' must be at most max_tokens (" + std::to_string(r.params.max_tokens) +
                                  "), got " + std::to_string(r.params.min_tokens));
  r.params.sampling.temperature = float(number(j, "temperature", 0.0, 2.0, 1.0));
  r.params.sampling.top_p = float(number(j, "top_p", 0.0, 1.0, 1.0));
  if (r.params.sampling.top_p <= 0.0f) bad_request("top_p", "'top_p' must be in (0, 1]");
  r.params.sampling.top_k = integer(j, "top_k", -1).value_or(0);
  if (auto seed = integer(j, "seed", INT64_MIN)) r.params.seed = uint64_t(*seed);
  if (auto n = integer(j, "n", 1)) {
    if (*n > kMaxChoices) bad_request("n", "'n' must be at most " + std::to_string(kMaxChoices) + ", got " + std::to_string(*n));
    r.n = int(*n);
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"})
    if (number(j, penalty, -2.0, 2.0, 0.0) != 0.0)
      bad_request(penalty, std::string("'") + penalty + "' is not supported (only 0)");
  // Logprobs: completions ask with a count of alternatives (OpenAI allows 5, vLLM by default 20); chat with
  // `logprobs: true` and `top_logprobs` alternatives.
  const auto max_top = int64_t(engine::kMaxTopLogprobs);
  if (kind == ApiKind::Completion) {
    if (const json* lp = field(j, "logprobs"); lp && !(lp->is_boolean() && !lp->get<bool>())) {
      const auto k = integer(j, "logprobs", 0);
      if (*k > max_top) bad_request("logprobs", "'logprobs' must be at most " + std::to_string(max_top) + ", got " + lp->dump());
      r.params.logprobs = int(*k);
    }
    r.echo = boolean(j, "echo", false);
    if (r.echo) r.params.prompt_logprobs = r.params.logprobs;
  } else {
    const auto top = integer(j, "top_logprobs", 0);
    if (top && *top > max_top)
      bad_request("top_logprobs", "'top_logprobs' must be at most " + std::to_string(max_top) + ", got " + std::to_string(*top));
    if (boolean(j, "logprobs", false))
      r.params.logprobs = int(top.value_or(0));
    else if (top && *top > 0)
      bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  if (const json* stop = field(j, "stop")) {
    if (stop->is_string()) {
      r.params.stop_strings.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& s : *stop) {
        if (!s.is_string()) bad_request("stop", "'stop' must be a string or an array of strings");
        r.params.stop_strings.push_back(s.get<std::string>());
      }
    } else {
      bad_request("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& s : r.params.stop_strings)
      if (s.empty()) bad_request("stop", "stop strings must not be empty");
  }
  if (const json* ids = field(j, "stop_token_ids")) {
    if (!ids->is_array()) bad_request("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    for (int32_t id : token_ids(*ids, "stop_token_ids")) r.params.stop_token_ids.push_back(id);
  }
  r.params.ignore_eos = boolean(j, "ignore_eos", false);
  r.params.skip_special_tokens = boolean(j, "skip_special_tokens", true);
  r.stream = boolean(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  refuse_unimplemented_fields(j, kind);
  r.ignored_fields = unknown_fields(j, kind);
  return r;
}

}  // namespace moeserve::server
