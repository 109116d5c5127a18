#include "server/request_fields.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "server/api_error.h"
#include "server/json_field.h"

namespace moeserve::server {
namespace {

using nlohmann::json;

// A field that is refused unless `neutral` says its value asks for nothing (absent and null always do).
struct Unimplemented {
  const char* name;
  bool (*neutral)(const json& value);
  const char* why;  // the rest of "'<name>' ... "
};

bool is_zero(const json& v) { return v.is_number() && v.get<double>() == 0.0; }
bool is_one(const json& v) { return v.is_number() && v.get<double>() == 1.0; }
bool is_empty_object(const json& v) { return v.is_object() && v.empty(); }
bool is_empty_array(const json& v) { return v.is_array() && v.empty(); }
bool is_empty_string(const json& v) { return v.is_string() && v.get<std::string>().empty(); }
bool never(const json&) { return false; }
bool is_text_format(const json& v) { return v.is_object() && json_field(v, "type") == "text"; }

constexpr const char* kNoConstrainedDecoding = "is not supported: moeserve has no constrained decoding";

// Both APIs. vLLM's and SGLang's constrained-decoding fields are refused in any non-null form.
constexpr std::array kCommon = {
    Unimplemented{"logit_bias", is_empty_object, "is not supported (only {})"},
    Unimplemented{"response_format", is_text_format,
                  "is not supported other than {\"type\": \"text\"} (no constrained decoding)"},
    Unimplemented{"repetition_penalty", is_one, "is not supported (only 1)"},
    Unimplemented{"min_p", is_zero, "is not supported (only 0)"},
    Unimplemented{"prompt_logprobs", never, "is not supported"},
    Unimplemented{"guided_json", never, kNoConstrainedDecoding},
    Unimplemented{"guided_regex", never, kNoConstrainedDecoding},
    Unimplemented{"guided_choice", never, kNoConstrainedDecoding},
    Unimplemented{"guided_grammar", never, kNoConstrainedDecoding},
    Unimplemented{"structured_outputs", never, kNoConstrainedDecoding},
    Unimplemented{"regex", never, kNoConstrainedDecoding},
    Unimplemented{"json_schema", never, kNoConstrainedDecoding},
    Unimplemented{"ebnf", never, kNoConstrainedDecoding},
};
constexpr std::array kCompletion = {
    Unimplemented{"best_of", is_one, "is not supported (only 1)"},
    Unimplemented{"suffix", is_empty_string, "is not supported (only \"\")"},
};
constexpr std::array kChat = {
    Unimplemented{"functions", is_empty_array, "is not supported: moeserve does not parse function calls"},
    Unimplemented{"function_call", [](const json& v) { return v == "none" || v == "auto"; },
                  "is not supported: moeserve does not parse function calls"},
};

// Parsed by parse_openai_request, or carrying nothing that changes the tokens (OpenAI's bookkeeping fields).
constexpr std::array<std::string_view, 18> kParsedCommon = {
    "model", "max_tokens", "min_tokens", "temperature", "top_p", "top_k", "seed", "n", "presence_penalty", "frequency_penalty",
    "logprobs", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens", "stream", "stream_options", "user"};
constexpr std::array<std::string_view, 2> kParsedCompletion = {"prompt", "echo"};
constexpr std::array<std::string_view, 9> kParsedChat = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls", "metadata", "store",
    "service_tier"};

template <size_t N>
void refuse_from(const json& body, const std::array<Unimplemented, N>& table) {
  for (const Unimplemented& u : table) {
    const json& v = json_field(body, u.name);
    if (!v.is_null() && !u.neutral(v)) bad_request(u.name, std::string("'") + u.name + "' " + u.why + ", got " + v.dump());
  }
}

// Tools: the chat template renders none (DeepSeek's V3 template has no tools section) and no tool calls are parsed
// out of the output, so tools are accepted only with tool_choice "none", where the model is not to call them, as
// vLLM does without --enable-auto-tool-choice. OpenAI's default tool_choice is "auto" when tools are given.
void refuse_tool_use(const json& body) {
  const json& tools = json_field(body, "tools");
  const json& choice = json_field(body, "tool_choice");
  const bool has_tools = !tools.is_null() && !is_empty_array(tools);
  if (has_tools && choice != "none")
    bad_request(choice.is_null() ? "tools" : "tool_choice",
                "tools are supported only with tool_choice \"none\" (moeserve does not parse tool calls), got "
                "tool_choice " + (choice.is_null() ? std::string("absent (\"auto\")") : choice.dump()));
  if (!choice.is_null() && choice != "none" && choice != "auto")
    bad_request("tool_choice", "'tool_choice' must be \"none\" or \"auto\" (moeserve does not parse tool calls), got " +
                                   choice.dump());
}

template <size_t N>
bool listed(std::string_view key, const std::array<std::string_view, N>& names) {
  return std::find(names.begin(), names.end(), key) != names.end();
}
template <size_t N>
bool listed(std::string_view key, const std::array<Unimplemented, N>& table) {
  return std::any_of(table.begin(), table.end(), [&](const Unimplemented& u) { return key == u.name; });
}

}  // namespace

void refuse_unimplemented_fields(const json& body, ApiKind kind) {
  refuse_from(body, kCommon);
  if (kind == ApiKind::Completion) {
    refuse_from(body, kCompletion);
  } else {
    refuse_from(body, kChat);
    refuse_tool_use(body);
  }
}

std::vector<std::string> unknown_fields(const json& body, ApiKind kind) {
  std::vector<std::string> out;
  if (!body.is_object()) return out;
  const bool chat = kind == ApiKind::Chat;
  for (const auto& [key, value] : body.items()) {
    const bool known = listed(key, kParsedCommon) || listed(key, kCommon) ||
                       (chat ? listed(key, kParsedChat) || listed(key, kChat)
                             : listed(key, kParsedCompletion) || listed(key, kCompletion));
    if (!known) out.push_back(key);
  }
  return out;
}

}  // namespace moeserve::server
