// The native DeepSeek chat template against HF's renders (tokenizer_goldens.json "chat") and against
// Jinja2 renders of the same template on edge cases (chat_template_jinja.json, tools/check_chat_template.py).
#include "server/chat_template.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "server/chat_message.h"
#include "server/tokenizer_test_util.h"

namespace moeserve::server {
namespace {

using testing::deepseek_tokenizer;

std::string render(const nlohmann::json& messages, bool add_generation_prompt) {
  const auto parsed = chat_messages_from_json(messages);
  return render_deepseek_chat(parsed, {deepseek_tokenizer().bos_token(), add_generation_prompt});
}

bool all_ints(const nlohmann::json& ids) {
  return ids.is_array() && std::all_of(ids.begin(), ids.end(), [](const auto& v) { return v.is_number_integer(); });
}

TEST(ChatTemplate, MatchesEveryHfGoldenTextAndIds) {
  const auto& tok = deepseek_tokenizer();
  const auto& cases = testing::goldens()["chat"];
  ASSERT_EQ(cases.size(), 14u);
  for (const auto& c : cases) {
    const auto text = render(c["messages"], c["add_generation_prompt"].get<bool>());
    EXPECT_EQ(text, c["text"].get<std::string>()) << c["name"];
    // HF tokenizes a render without adding special tokens (the BOS is in the text).
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids.front(), *tok.bos_id()) << c["name"];
    EXPECT_EQ(tok.decode(ids), text);
    ASSERT_TRUE(all_ints(c["ids"])) << c["name"];
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << c["name"];
  }
}

TEST(ChatTemplate, KnownIdsOfASimpleRender) {
  const auto& tok = deepseek_tokenizer();
  const auto ids = tok.encode(render({{{"role", "user"}, {"content", "Hello!"}}}, true));
  std::vector<int32_t> expected{0, 128803};
  for (int32_t id : tok.encode("Hello!")) expected.push_back(id);
  expected.push_back(128804);
  EXPECT_EQ(ids, expected);
}

TEST(ChatTemplate, MatchesJinja2OnEdgeCases) {
  const auto renders = testing::read_json_file(moeserve::testing::fixture("tokenizer/chat_template_jinja.json"));
  ASSERT_GE(renders["renders"].size(), 20u);
  for (const auto& r : renders["renders"]) {
    EXPECT_EQ(render(r["messages"], r["add_generation_prompt"].get<bool>()), r["text"].get<std::string>())
        << r["name"] << " add_generation_prompt=" << r["add_generation_prompt"];
  }
}

TEST(ChatTemplate, StructuredMessages) {
  std::vector<ChatMessage> messages{
      {"system", "Be brief.", {}},
      {"user", "Weather?", {}},
      {"assistant", std::nullopt, {{"function", "get_weather", "{\"city\": \"Oslo\"}"}}},
      {"tool", "{\"temp\": -3}", {}},
  };
  EXPECT_EQ(render_deepseek_chat(messages, {"<BOS>", true}),
            "<BOS>Be brief.<｜User｜>Weather?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
            "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁outputs▁begin｜>"
            "<｜tool▁output▁begin｜>{\"temp\": -3}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
}

TEST(ChatMessages, ContentPartsAndObjectArguments) {
  const auto messages = chat_messages_from_json(nlohmann::json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null,
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}])"));
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].content, "a\nb");
  EXPECT_EQ(messages[1].content, std::nullopt);
  ASSERT_EQ(messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(messages[1].tool_calls[0].arguments, "{\"x\":1}");
}

std::string error_of(const std::string& messages_json) {
  try {
    chat_messages_from_json(nlohmann::json::parse(messages_json));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatMessages, BadInputNamesTheField) {
  EXPECT_EQ(error_of(R"({"role": "user"})"), "messages: expected an array");
  EXPECT_EQ(error_of(R"([1])"), "messages[0]: expected an object with \"role\" and \"content\"");
  EXPECT_EQ(error_of(R"([{"content": "x"}])"), "messages[0].role: expected a string");
  EXPECT_EQ(error_of(R"([{"role": "robot", "content": "x"}])"),
            "messages[0].role: expected system, user, assistant or tool, got \"robot\"");
  EXPECT_EQ(error_of(R"([{"role": "user", "content": 5}])"), "messages[0].content: expected a string");
  EXPECT_EQ(error_of(R"([{"role": "user", "content": "a"}, {"role": "user", "content": null}])"),
            "messages[1].content: expected a string");
  EXPECT_EQ(error_of(R"([{"role": "user", "content": [{"type": "image_url"}]}])"),
            "messages[0].content[0]: expected a {\"type\": \"text\", \"text\": ...} part (only text is supported)");
  EXPECT_EQ(error_of(R"([{"role": "user", "content": "x", "tool_calls": []}])"),
            "messages[0].tool_calls: only assistant messages call tools");
  EXPECT_EQ(error_of(R"([{"role": "assistant", "content": null, "tool_calls": [{"type": "function"}]}])"),
            "messages[0].tool_calls[0].function: expected an object with \"name\" and \"arguments\"");
  // nlohmann's parser rejects invalid UTF-8 itself; a document built in code can still carry it.
  const nlohmann::json bad_utf8 = nlohmann::json::array({{{"role", "user"}, {"content", std::string("ok\xff")}}});
  try {
    chat_messages_from_json(bad_utf8);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "messages[0].content: invalid UTF-8 at byte 2");
  }
  // Messages built in code bypass the JSON checks; the renderer still refuses a user turn without content.
  std::vector<ChatMessage> no_content{{"user", std::nullopt, {}}};
  EXPECT_THROW(render_deepseek_chat(no_content, {"", true}), Error);
}

}  // namespace
}  // namespace moeserve::server
