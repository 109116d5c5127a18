// A response of several choices put together from interleaved engine events: the SSE chunks carry each choice's
// index (the role on its first), the usage comes once after the last finish, the body lists the choices in order;
// an error in one choice ends the response and leaves the others to abort.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "server/completion_response.h"

namespace moeserve::server {
namespace {

using nlohmann::json;
using engine::FinishReason;
using std::chrono::milliseconds;

engine::RequestEvent event(const std::string& text, int64_t completion, FinishReason finish = FinishReason::None) {
  engine::RequestEvent e;
  e.text = text;
  e.prompt_tokens = 5;
  e.completion_tokens = completion;
  e.finish = finish;
  return e;
}

ResponseHeader header(ApiKind kind, bool stream) {
  ResponseHeader h;
  h.kind = kind;
  h.id = "x-1";
  h.created = 7;
  h.model = "m";
  h.stream = stream;
  h.include_usage = true;
  return h;
}

std::vector<std::string> payloads(const std::string& sse) {
  std::vector<std::string> out;
  std::regex line("data: (.*)\n\n");
  for (std::sregex_iterator it(sse.begin(), sse.end(), line), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

TEST(CompletionResponse, StreamedChoicesInterleaveWithTheirIndices) {
  CompletionResponse r(header(ApiKind::Chat, true), 2);
  r.on_event(1, event("b", 1));
  r.on_event(0, event("a", 1));
  r.on_event(1, event("c", 2, FinishReason::Length));
  bool finished = true;
  std::string sent = r.next(milliseconds(0), &finished);
  EXPECT_FALSE(finished);  // choice 0 still runs
  EXPECT_EQ(r.unfinished(), std::vector<int>{0});
  r.on_event(0, event("d", 2, FinishReason::Stop));
  sent += r.next(milliseconds(0), &finished);
  EXPECT_TRUE(finished);
  EXPECT_TRUE(r.unfinished().empty());
  const auto ev = payloads(sent);
  ASSERT_EQ(ev.size(), 8u);
  const std::vector<std::pair<int, json>> expected = {
      {1, {{"role", "assistant"}, {"content", "b"}}}, {0, {{"role", "assistant"}, {"content", "a"}}},
      {1, {{"content", "c"}}}, {1, json::object()}, {0, {{"content", "d"}}}, {0, json::object()}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const json c = json::parse(ev[i]);
    EXPECT_EQ(c["id"], "x-1");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["choices"][0]["index"], expected[i].first) << ev[i];
    EXPECT_EQ(c["choices"][0]["delta"], expected[i].second) << ev[i];
  }
  EXPECT_EQ(json::parse(ev[3])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json::parse(ev[5])["choices"][0]["finish_reason"], "stop");
  const json usage = json::parse(ev[6]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], (json{{"prompt_tokens", 5}, {"completion_tokens", 4}, {"total_tokens", 9}}));
  EXPECT_EQ(ev[7], "[DONE]");
}

TEST(CompletionResponse, BodyListsTheChoicesInOrder) {
  CompletionResponse r(header(ApiKind::Completion, false), 3);
  r.on_event(2, event("z", 1, FinishReason::Stop));
  r.on_event(0, event("x", 1));
  bool finished = true;
  EXPECT_EQ(r.next(milliseconds(0), &finished), "");
  EXPECT_FALSE(finished);
  r.on_event(0, event("y", 3, FinishReason::Length));
  r.on_event(1, event("w", 2, FinishReason::Length));
  const json body = json::parse(r.next(milliseconds(0), &finished));
  EXPECT_TRUE(finished);
  EXPECT_EQ(body["object"], "text_completion");
  ASSERT_EQ(body["choices"].size(), 3u);
  const std::vector<std::pair<std::string, std::string>> expected = {{"xy", "length"}, {"w", "length"}, {"z", "stop"}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["text"], expected[i].first);
    EXPECT_EQ(body["choices"][i]["finish_reason"], expected[i].second);
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
}

TEST(CompletionResponse, AnErrorInOneChoiceEndsTheResponse) {
  for (bool stream : {true, false}) {
    CompletionResponse r(header(ApiKind::Completion, stream), 3);
    r.on_event(0, event("a", 1, FinishReason::Length));
    engine::RequestEvent failed = event("", 0, FinishReason::Error);
    failed.error = "out of pages";
    r.on_event(1, failed);
    r.on_event(2, event("late", 1));  // dropped: the response has ended
    EXPECT_EQ(r.unfinished(), std::vector<int>{2});
    bool finished = false;
    const std::string sent = r.next(milliseconds(0), &finished);
    EXPECT_TRUE(finished);
    EXPECT_EQ(sent.find("late"), std::string::npos);
    const json error = json::parse(stream ? payloads(sent).at(payloads(sent).size() - 2) : sent);
    EXPECT_EQ(error["error"]["message"], "out of pages") << sent;
    EXPECT_EQ(error["error"]["code"], 500);
    if (stream) EXPECT_EQ(payloads(sent).back(), "[DONE]");
  }
}

}  // namespace
}  // namespace moeserve::server
