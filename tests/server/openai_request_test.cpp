// Request fields parsed into engine parameters: logprobs in each API's form, and n.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"

namespace moeserve::server {
namespace {

using nlohmann::json;

ParsedRequest parse(ApiKind kind, json extra) {
  json body = {{"max_tokens", 4}};
  if (kind == ApiKind::Chat) body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
  else body["prompt"] = "hi";
  if (!extra.is_null()) body.update(extra);
  return parse_openai_request(kind, body.dump(), RequestDefaults{});
}

std::string refused_param(ApiKind kind, json extra) {
  try {
    parse(kind, extra);
  } catch (const ApiError& e) {
    return e.body()["error"]["param"];
  }
  return "";
}

TEST(OpenAiRequest, LogprobsInEachApisForm) {
  // Completions: a count of alternatives; false, null or absent is none.
  EXPECT_EQ(parse(ApiKind::Completion, {}).params.logprobs, -1);
  EXPECT_EQ(parse(ApiKind::Completion, {{"logprobs", nullptr}}).params.logprobs, -1);
  EXPECT_EQ(parse(ApiKind::Completion, {{"logprobs", false}}).params.logprobs, -1);
  EXPECT_EQ(parse(ApiKind::Completion, {{"logprobs", 0}}).params.logprobs, 0);
  EXPECT_EQ(parse(ApiKind::Completion, {{"logprobs", 5}}).params.logprobs, 5);
  EXPECT_EQ(refused_param(ApiKind::Completion, {{"logprobs", 21}}), "logprobs");
  EXPECT_EQ(refused_param(ApiKind::Completion, {{"logprobs", -1}}), "logprobs");
  EXPECT_EQ(refused_param(ApiKind::Completion, {{"logprobs", true}}), "logprobs");
  // Chat: logprobs true, with top_logprobs alternatives.
  EXPECT_EQ(parse(ApiKind::Chat, {{"logprobs", true}}).params.logprobs, 0);
  EXPECT_EQ(parse(ApiKind::Chat, {{"logprobs", true}, {"top_logprobs", 20}}).params.logprobs, 20);
  EXPECT_EQ(parse(ApiKind::Chat, {{"logprobs", false}, {"top_logprobs", 0}}).params.logprobs, -1);
  EXPECT_EQ(refused_param(ApiKind::Chat, {{"top_logprobs", 2}}), "top_logprobs");
  EXPECT_EQ(refused_param(ApiKind::Chat, {{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs");
  EXPECT_EQ(refused_param(ApiKind::Chat, {{"logprobs", 3}}), "logprobs");
}

TEST(OpenAiRequest, EchoAsksForThePromptsLogprobsWhenLogprobsAreAsked) {
  EXPECT_FALSE(parse(ApiKind::Completion, {}).echo);
  EXPECT_EQ(parse(ApiKind::Completion, {{"echo", true}}).params.prompt_logprobs, -1);
  const ParsedRequest r = parse(ApiKind::Completion, {{"echo", true}, {"logprobs", 3}});
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.params.prompt_logprobs, 3);
  EXPECT_EQ(parse(ApiKind::Completion, {{"logprobs", 3}}).params.prompt_logprobs, -1);
  EXPECT_EQ(refused_param(ApiKind::Completion, {{"echo", 1}}), "echo");
}

TEST(OpenAiRequest, MinTokensUpToMaxTokens) {
  EXPECT_EQ(parse(ApiKind::Completion, {}).params.min_tokens, 0);
  EXPECT_EQ(parse(ApiKind::Completion, {{"min_tokens", 4}}).params.min_tokens, 4);
  EXPECT_EQ(refused_param(ApiKind::Completion, {{"min_tokens", 5}}), "min_tokens");  // max_tokens is 4
  EXPECT_EQ(refused_param(ApiKind::Chat, {{"min_tokens", -1}}), "min_tokens");
}

TEST(OpenAiRequest, ChoicesFromOneToOpenAisLimit) {
  EXPECT_EQ(parse(ApiKind::Chat, {}).n, 1);
  EXPECT_EQ(parse(ApiKind::Chat, {{"n", 128}}).n, 128);
  EXPECT_EQ(refused_param(ApiKind::Chat, {{"n", 0}}), "n");
  EXPECT_EQ(refused_param(ApiKind::Completion, {{"n", 129}}), "n");
}

}  // namespace
}  // namespace moeserve::server
