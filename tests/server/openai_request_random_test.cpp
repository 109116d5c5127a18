// Request bodies from fresh random mutations of valid ones: every body either parses into a request whose
// values the engine accepts, or is refused with a 400 ApiError naming what was wrong; nothing else escapes
// (an escaping exception would be the server's 500). Chat messages that parse also render to valid UTF-8.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/chat_template.h"
#include "server/openai_request.h"
#include "server/utf8.h"
#include "test_seed.h"

namespace moeserve::server {
namespace {

using nlohmann::json;

json random_value(std::mt19937_64& g, int depth = 0) {
  static const std::vector<json> scalars = {
      nullptr, true, false, 0, 1, -1, 2, 7, 255, 4096, int64_t(1) << 31, int64_t(1) << 53, INT64_MAX, INT64_MIN,
      UINT64_MAX, 0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 2.5, -2.0, 1e-300, 1e308, -1e308, "", "x", "user", "assistant",
      "system", "tool", "text", "image_url", "function", "hello", "<｜User｜>", "\u00e9\u4e2d😀", std::string(1, '\0')};
  const int kind = std::uniform_int_distribution<int>(0, depth > 2 ? 0 : 3)(g);
  if (kind == 0 || kind == 1) return scalars[std::uniform_int_distribution<size_t>(0, scalars.size() - 1)(g)];
  if (kind == 2) {
    json a = json::array();
    for (int n = std::uniform_int_distribution<int>(0, 4)(g); n > 0; --n) a.push_back(random_value(g, depth + 1));
    return a;
  }
  static const std::vector<std::string> keys = {"role", "content", "type", "text", "tool_calls", "function", "name",
                                                "arguments", "include_usage", "id"};
  json o = json::object();
  for (int n = std::uniform_int_distribution<int>(0, 4)(g); n > 0; --n)
    o[keys[std::uniform_int_distribution<size_t>(0, keys.size() - 1)(g)]] = random_value(g, depth + 1);
  return o;
}

json valid_body(ApiKind kind, std::mt19937_64& g) {
  json body = {{"model", "m"}, {"max_tokens", 8}, {"temperature", 0.7}};
  if (kind == ApiKind::Completion) {
    body["prompt"] = g() % 2 ? json("Once upon a time") : json::array({1, 2, 3});
  } else {
    body["messages"] = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                    {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Hi"}}})}},
                                    {{"role", "assistant"}, {"content", nullptr},
                                     {"tool_calls", json::array({{{"type", "function"},
                                                                  {"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}})}},
                                    {{"role", "tool"}, {"content", "42"}}});
  }
  return body;
}

// Field-level mutations: set a known field (or an element of the messages) to a random value, or drop it.
json mutate(json body, std::mt19937_64& g) {
  static const std::vector<std::string> fields = {
      "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
      "n", "presence_penalty", "frequency_penalty", "logprobs", "stop", "stop_token_ids", "ignore_eos",
      "skip_special_tokens", "stream", "stream_options", "response_format", "tools", "tool_choice", "logit_bias",
      "min_tokens", "echo", "best_of", "unknown_field"};
  for (int n = std::uniform_int_distribution<int>(1, 3)(g); n > 0; --n) {
    const std::string& f = fields[std::uniform_int_distribution<size_t>(0, fields.size() - 1)(g)];
    const int how = std::uniform_int_distribution<int>(0, 3)(g);
    if (how == 0) {
      body.erase(f);
    } else if (how == 1 && body.contains("messages") && body["messages"].is_array() && !body["messages"].empty()) {
      json& m = body["messages"][std::uniform_int_distribution<size_t>(0, body["messages"].size() - 1)(g)];
      if (m.is_object()) m[g() % 2 ? "content" : (g() % 2 ? "role" : "tool_calls")] = random_value(g, 1);
      else m = random_value(g, 1);
    } else {
      body[f] = random_value(g);
    }
  }
  return body;
}

// Byte-level mutations of the serialized body: flips, cuts and insertions (mostly invalid JSON or UTF-8).
std::string mutate_bytes(std::string text, std::mt19937_64& g) {
  for (int n = std::uniform_int_distribution<int>(1, 3)(g); n > 0 && !text.empty(); --n) {
    const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(g);
    switch (g() % 3) {
      case 0: text[at] = char(g()); break;
      case 1: text.resize(at); break;
      default: text.insert(at, 1, "{}[]\",:\\ \x80\xff"[g() % 12]); break;
    }
  }
  return text;
}

// What the engine and the sampler rely on when parse_openai_request returns.
void expect_usable(const ParsedRequest& r, ApiKind kind, const std::string& body) {
  EXPECT_GE(r.params.max_tokens, 1) << body;
  EXPECT_TRUE(r.n >= 1 && r.n <= kMaxChoices) << body;
  EXPECT_TRUE(r.params.min_tokens >= 0 && r.params.min_tokens <= r.params.max_tokens) << body;
  EXPECT_TRUE(r.params.sampling.temperature >= 0.0f && r.params.sampling.temperature <= 2.0f) << body;
  EXPECT_TRUE(r.params.sampling.top_p > 0.0f && r.params.sampling.top_p <= 1.0f) << body;
  EXPECT_GE(r.params.sampling.top_k, -1) << body;
  for (const auto& s : r.params.stop_strings) EXPECT_FALSE(s.empty()) << body;
  for (int32_t id : r.params.stop_token_ids) EXPECT_GE(id, 0) << body;
  if (kind == ApiKind::Completion) {
    EXPECT_NE(r.prompt_text.has_value(), r.prompt_ids.has_value()) << body;
    if (r.prompt_ids)
      for (int32_t id : *r.prompt_ids) EXPECT_GE(id, 0) << body;
  } else {
    ASSERT_FALSE(r.messages.empty()) << body;
    ChatTemplateOptions options;
    options.bos_token = "<｜begin▁of▁sentence｜>";
    try {
      EXPECT_TRUE(utf8::is_valid(render_deepseek_chat(r.messages, options))) << body;
    } catch (const Error&) {  // a message the template cannot render: the server answers 400 for it
    }
  }
}

void check_body(ApiKind kind, const std::string& body, int* parsed, int* refused) {
  try {
    const ParsedRequest r = parse_openai_request(kind, body, RequestDefaults{});
    expect_usable(r, kind, body);
    ++*parsed;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_FALSE(std::string(e.what()).empty()) << body;
    ++*refused;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "escaped as " << typeid(e).name() << ": " << e.what() << "\nbody: " << body;
  }
}

TEST(OpenAiRequestRandom, EveryBodyParsesOrIsRefusedWith400) {
  auto g = moeserve::testing::seeded();
  for (ApiKind kind : {ApiKind::Completion, ApiKind::Chat}) {
    int parsed = 0, refused = 0;
    for (int i = 0; i < 4000; ++i) {
      const json body = mutate(valid_body(kind, g), g);
      const std::string text = body.dump();
      check_body(kind, i % 4 == 3 ? mutate_bytes(text, g) : text, &parsed, &refused);
    }
    // Both outcomes were exercised many times (the mutations are not all fatal, nor all harmless).
    EXPECT_GT(parsed, 200) << (kind == ApiKind::Chat ? "chat" : "completion");
    EXPECT_GT(refused, 200) << (kind == ApiKind::Chat ? "chat" : "completion");
  }
}

}  // namespace
}  // namespace moeserve::server
