// Fields that moeserve does not implement: each one that would change the answer is refused with a 400 naming it
// unless at its neutral value; tools pass only with tool_choice "none"; fields nobody defines are listed, and every
// field the parser reads is known.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/request_fields.h"

namespace moeserve::server {
namespace {

using nlohmann::json;

json base(ApiKind kind) {
  json body = {{"max_tokens", 4}};
  if (kind == ApiKind::Chat) body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
  else body["prompt"] = "hi";
  return body;
}

// The `param` and message of the 400 that parse_openai_request gives `body`, or "" if it parses.
std::pair<std::string, std::string> refusal(ApiKind kind, const json& body) {
  try {
    parse_openai_request(kind, body.dump(), RequestDefaults{});
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return {e.body()["error"]["param"].get<std::string>(), e.what()};
  }
  return {"", ""};
}

void expect_refused(ApiKind kind, const std::string& field, const json& value, const std::string& param = "") {
  json body = base(kind);
  body[field] = value;
  const auto [got_param, message] = refusal(kind, body);
  EXPECT_EQ(got_param, param.empty() ? field : param) << body.dump() << " -> " << message;
  EXPECT_NE(message.find("not supported"), std::string::npos) << message;
}

void expect_accepted(ApiKind kind, const json& extra) {
  json body = base(kind);
  body.update(extra);
  const auto [param, message] = refusal(kind, body);
  EXPECT_EQ(param, "") << body.dump() << " -> " << message;
  EXPECT_EQ(message, "") << body.dump();
}

TEST(RequestFields, WhatWouldChangeTheAnswerIsRefused) {
  for (ApiKind kind : {ApiKind::Completion, ApiKind::Chat}) {
    expect_refused(kind, "logit_bias", {{"5", 100}});
    expect_refused(kind, "response_format", {{"type", "json_object"}});
    expect_refused(kind, "response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}});
    expect_refused(kind, "response_format", "text");  // not the object form
    expect_refused(kind, "repetition_penalty", 1.1);
    expect_refused(kind, "min_p", 0.05);
    expect_refused(kind, "prompt_logprobs", 1);
    for (const char* f : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
                          "regex", "json_schema", "ebnf"})
      expect_refused(kind, f, "x");
  }
  expect_refused(ApiKind::Completion, "best_of", 2);
  expect_refused(ApiKind::Completion, "suffix", " the end");
  expect_refused(ApiKind::Chat, "functions", json::array({{{"name", "f"}}}));
  expect_refused(ApiKind::Chat, "function_call", {{"name", "f"}});
}

TEST(RequestFields, NeutralValuesAreAccepted) {
  const json neutral = {{"logit_bias", json::object()}, {"response_format", {{"type", "text"}}}, {"min_tokens", 0},
                        {"repetition_penalty", 1.0}, {"min_p", 0}, {"prompt_logprobs", nullptr},
                        {"guided_json", nullptr}, {"regex", nullptr}};
  expect_accepted(ApiKind::Completion, neutral);
  expect_accepted(ApiKind::Chat, neutral);
  expect_accepted(ApiKind::Completion, {{"echo", false}, {"best_of", 1}, {"suffix", ""}});
  expect_accepted(ApiKind::Chat, {{"top_logprobs", 0}, {"functions", json::array()}, {"function_call", "none"}});
}

TEST(RequestFields, ToolsOnlyWithToolChoiceNone) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
  json body = base(ApiKind::Chat);
  body["tools"] = tools;  // OpenAI's default tool_choice with tools is "auto"
  EXPECT_EQ(refusal(ApiKind::Chat, body).first, "tools");
  body["tool_choice"] = "auto";
  EXPECT_EQ(refusal(ApiKind::Chat, body).first, "tool_choice");
  body["tool_choice"] = "required";
  EXPECT_EQ(refusal(ApiKind::Chat, body).first, "tool_choice");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  EXPECT_EQ(refusal(ApiKind::Chat, body).first, "tool_choice");
  body["tool_choice"] = "none";
  EXPECT_EQ(refusal(ApiKind::Chat, body).first, "");
  // Without tools, "auto" and "none" ask for nothing; "required" asks for a call that cannot come.
  expect_accepted(ApiKind::Chat, {{"tools", json::array()}, {"tool_choice", "auto"}});
  expect_accepted(ApiKind::Chat, {{"tool_choice", "none"}, {"parallel_tool_calls", true}});
  json required = base(ApiKind::Chat);
  required["tool_choice"] = "required";
  EXPECT_EQ(refusal(ApiKind::Chat, required).first, "tool_choice");
}

TEST(RequestFields, UnknownFieldsAreListedAndKnownOnesAreNot) {
  json chat = base(ApiKind::Chat);
  chat.update({{"model", "demo"}, {"max_completion_tokens", 4}, {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 5},
               {"seed", 1}, {"n", 1}, {"presence_penalty", 0}, {"frequency_penalty", 0}, {"logprobs", false},
               {"stop", "x"}, {"stop_token_ids", {1}}, {"ignore_eos", false}, {"skip_special_tokens", true},
               {"stream", false}, {"stream_options", {{"include_usage", true}}}, {"user", "u"},
               {"tool_choice", "none"}, {"min_tokens", 0}, {"zeta", 1}, {"alpha", 2}});
  const ParsedRequest r = parse_openai_request(ApiKind::Chat, chat.dump(), RequestDefaults{});
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"alpha", "zeta"}));
  // A field of the other API is unknown here.
  json completion = base(ApiKind::Completion);
  completion["messages"] = json::array();
  completion["echo"] = false;
  EXPECT_EQ(unknown_fields(completion, ApiKind::Completion), (std::vector<std::string>{"messages"}));
  EXPECT_EQ(unknown_fields(base(ApiKind::Chat), ApiKind::Chat), std::vector<std::string>{});
}

}  // namespace
}  // namespace moeserve::server
