// Streaming decode never emits a broken UTF-8 sequence and adds up to Tokenizer::decode.
#include "server/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include "server/tokenizer_test_util.h"
#include "server/utf8.h"

namespace moeserve::server {
namespace {

using testing::deepseek_tokenizer;

// Pushes ids one at a time; every chunk must be valid UTF-8 on its own.
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special, size_t* held = nullptr) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::string text;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_TRUE(utf8::is_valid(chunk)) << "broken UTF-8 emitted after id " << id;
    if (held && detok.pending_bytes() > 0) ++*held;
    text += chunk;
  }
  text += detok.flush();
  EXPECT_EQ(detok.pending_bytes(), 0u);
  return text;
}

TEST(IncrementalDetokenizer, EmojiWithJoinersArriveWhole) {
  const auto& tok = deepseek_tokenizer();
  const std::string text = "Family: 👨‍👩‍👧‍👦 and 🏳️‍🌈, 👩🏿‍💻 🇫🇷";
  const auto ids = tok.encode(text);
  size_t held = 0;
  EXPECT_EQ(stream(tok, ids, false, &held), text);
  EXPECT_GT(held, 0u) << "expected some tokens to end inside a character";
}

TEST(IncrementalDetokenizer, CjkText) {
  const auto& tok = deepseek_tokenizer();
  const std::string text = "中文测试：你好，世界！日本語のテキスト、한국어 텍스트입니다.";
  EXPECT_EQ(stream(tok, tok.encode(text), false), text);
}

TEST(IncrementalDetokenizer, SpecialTokenMidSequence) {
  const auto& tok = deepseek_tokenizer();
  const std::string text = "你好<｜end▁of▁sentence｜>🙂<｜User｜>ok";
  const auto ids = tok.encode(text);
  EXPECT_EQ(stream(tok, ids, false), text);
  EXPECT_EQ(stream(tok, ids, true), "你好🙂<｜User｜>ok");  // only special tokens are skipped
}

TEST(IncrementalDetokenizer, AddsUpToDecodeForEveryGoldenText) {
  const auto& tok = deepseek_tokenizer();
  for (const auto& c : testing::goldens()["encode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(stream(tok, ids, false), tok.decode(ids, false)) << c["text"];
    EXPECT_EQ(stream(tok, ids, true), tok.decode(ids, true)) << c["text"];
  }
}

TEST(IncrementalDetokenizer, BrokenSequencesBecomeReplacementCharactersLikeDecode) {
  const auto& tok = deepseek_tokenizer();
  const auto emoji = tok.encode("😀");
  ASSERT_GT(emoji.size(), 1u);
  // Cut before the last byte-level token, then: end of stream / an added token / plain text.
  std::vector<int32_t> cut(emoji.begin(), emoji.end() - 1);
  EXPECT_EQ(stream(tok, cut, false), "\xEF\xBF\xBD");
  auto then_special = cut;
  then_special.push_back(*tok.token_to_id("<｜User｜>"));
  EXPECT_EQ(stream(tok, then_special, false), tok.decode(then_special));
  EXPECT_EQ(tok.decode(then_special), "\xEF\xBF\xBD<｜User｜>");
  auto then_text = cut;
  for (int32_t id : tok.encode("a")) then_text.push_back(id);
  EXPECT_EQ(stream(tok, then_text, false), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok.decode(then_text), "\xEF\xBF\xBD" "a");
}

TEST(IncrementalDetokenizer, IgnoresIdsOutsideTheVocabulary) {
  const auto& tok = deepseek_tokenizer();
  auto ids = tok.encode("hi");
  ids.insert(ids.begin(), static_cast<int32_t>(tok.vocab_size()) + 100);
  ids.push_back(-5);
  EXPECT_EQ(stream(tok, ids, false), "hi");
}

}  // namespace
}  // namespace moeserve::server
