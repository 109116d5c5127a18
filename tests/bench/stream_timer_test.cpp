// TTFT/ITL/E2E/output_len from timestamped SSE messages (timestamps given, so the values are exact).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/stream_timer.h"

namespace moeserve::bench {
namespace {
using nlohmann::json;

std::string completion(const std::string& text, int running_tokens = -1) {
  json j = {{"choices", json::array({{{"index", 0}, {"text", text}}})}};
  if (running_tokens >= 0) j["usage"] = {{"completion_tokens", running_tokens}};
  return j.dump();
}

std::string usage_only(int tokens) {
  return json{{"choices", json::array()}, {"usage", {{"completion_tokens", tokens}}}}.dump();
}

TEST(BenchStreamTimer, SpreadsMultiTokenChunksUsingRunningUsage) {
  StreamTimer t(Api::kCompletions);
  ASSERT_TRUE(t.on_message(completion("", 0), 0.0625));  // empty text: not the first token
  ASSERT_TRUE(t.on_message(completion("a", 1), 0.5));
  ASSERT_TRUE(t.on_message(completion("b", 2), 0.625));
  ASSERT_TRUE(t.on_message(completion("cd", 4), 0.875));   // two tokens in one chunk
  ASSERT_TRUE(t.on_message(completion("efg", 7), 1.25));  // three tokens
  ASSERT_TRUE(t.on_message(usage_only(7), 1.25));
  ASSERT_TRUE(t.on_message("[DONE]", 1.5));
  RequestOutput out;
  t.finish(out, 16);
  ASSERT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.ttft, 0.5);
  EXPECT_EQ(out.latency, 1.5);  // the [DONE] line counts
  EXPECT_EQ(out.output_len, 7);  // from usage, not the requested 16
  EXPECT_TRUE(out.output_len_from_usage);
  EXPECT_EQ(out.generated_text, "abcdefg");
  EXPECT_EQ(out.itl, (std::vector<double>{0.125, 0.125, 0.125, 0.125, 0.125, 0.125}));
}

TEST(BenchStreamTimer, AFinalCountAboveTheChunkCountIsSpreadEvenly) {
  // Speculative decoding without running counts: 3 text chunks, usage says 7 tokens at the end. The
  // 6 tokens after the first chunk go 3 + 3 over the two later chunks.
  StreamTimer t(Api::kCompletions);
  ASSERT_TRUE(t.on_message(completion("a"), 0.25));
  ASSERT_TRUE(t.on_message(completion("bcd"), 0.625));
  ASSERT_TRUE(t.on_message(completion("efg"), 1.0));
  ASSERT_TRUE(t.on_message(usage_only(7), 1.0));
  RequestOutput out;
  t.finish(out, 16);
  EXPECT_EQ(out.output_len, 7);
  EXPECT_EQ(out.itl, (std::vector<double>{0.125, 0.125, 0.125, 0.125, 0.125, 0.125}));
  // 5 later tokens over 2 chunks: rounding gives 3 (⌊2.5+0.5⌋) then 2.
  StreamTimer u(Api::kCompletions);
  ASSERT_TRUE(u.on_message(completion("a"), 0.25));
  ASSERT_TRUE(u.on_message(completion("bcd"), 0.625));
  ASSERT_TRUE(u.on_message(completion("ef"), 0.875));
  ASSERT_TRUE(u.on_message(usage_only(6), 0.875));
  RequestOutput out2;
  u.finish(out2, 16);
  EXPECT_EQ(out2.itl, (std::vector<double>{0.125, 0.125, 0.125, 0.125, 0.125}));
}

TEST(BenchStreamTimer, WithoutUsageEachChunkIsOneTokenAndLengthIsRequested) {
  StreamTimer t(Api::kCompletions);
  ASSERT_TRUE(t.on_message(completion("a"), 0.25));
  ASSERT_TRUE(t.on_message(completion("bc"), 0.5));
  ASSERT_TRUE(t.on_message("[DONE]", 0.75));
  RequestOutput out;
  t.finish(out, 3);
  EXPECT_EQ(out.itl, std::vector<double>{0.25});
  EXPECT_EQ(out.output_len, 3);
  EXPECT_FALSE(out.output_len_from_usage);
}

TEST(BenchStreamTimer, TokensOfTextlessChunksGoToTheNextTextChunk) {
  // A reasoning parser that buffers: usage grows across chunks without text, then text arrives.
  StreamTimer t(Api::kCompletions);
  ASSERT_TRUE(t.on_message(completion("a", 1), 0.25));
  ASSERT_TRUE(t.on_message(completion("", 2), 0.375));
  ASSERT_TRUE(t.on_message(completion("", 3), 0.5));
  ASSERT_TRUE(t.on_message(completion("bcd", 4), 1.0));
  RequestOutput out;
  t.finish(out, 4);
  EXPECT_EQ(out.itl, (std::vector<double>{0.25, 0.25, 0.25}));
}

TEST(BenchStreamTimer, ChatCountsContentAndReasoningContent) {
  StreamTimer t(Api::kChat);
  auto delta = [](json d) { return json{{"choices", json::array({{{"index", 0}, {"delta", d}}})}}.dump(); };
  ASSERT_TRUE(t.on_message(delta({{"role", "assistant"}, {"content", ""}}), 0.125));
  ASSERT_TRUE(t.on_message(delta({{"reasoning_content", "think"}, {"content", nullptr}}), 0.25));
  ASSERT_TRUE(t.on_message(delta({{"content", "answer"}}), 0.5));
  ASSERT_TRUE(t.on_message(usage_only(2), 0.5));
  RequestOutput out;
  t.finish(out, 8);
  EXPECT_EQ(out.ttft, 0.25);
  EXPECT_EQ(out.itl, std::vector<double>{0.25});
  EXPECT_EQ(out.generated_text, "thinkanswer");
  EXPECT_EQ(out.output_len, 2);
}

TEST(BenchStreamTimer, BadStreamsFailTheRequest) {
  {
    StreamTimer t(Api::kCompletions);
    EXPECT_FALSE(t.on_message("{not json", 0.1));
    RequestOutput out;
    t.finish(out, 4);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("malformed"), std::string::npos);
  }
  {
    StreamTimer t(Api::kCompletions);
    EXPECT_FALSE(t.on_message(R"({"error":{"message":"out of memory"}})", 0.1));
    RequestOutput out;
    t.finish(out, 4);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("out of memory"), std::string::npos);
  }
  {
    StreamTimer t(Api::kCompletions);
    RequestOutput out;
    t.finish(out, 4);  // no message at all
    EXPECT_FALSE(out.success);
  }
}

TEST(BenchStreamTimer, FullResponses) {
  std::string text, error;
  std::optional<long long> tokens;
  ASSERT_TRUE(parse_full_response(Api::kChat, R"({"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":3}})",
                                  text, tokens, error));
  EXPECT_EQ(text, "hi");
  EXPECT_EQ(tokens, 3);
  ASSERT_TRUE(parse_full_response(Api::kCompletions, R"({"choices":[{"text":"yo"}]})", text, tokens, error));
  EXPECT_EQ(text, "yo");
  EXPECT_FALSE(tokens.has_value());
  EXPECT_FALSE(parse_full_response(Api::kCompletions, "oops", text, tokens, error));
}

}  // namespace
}  // namespace moeserve::bench
