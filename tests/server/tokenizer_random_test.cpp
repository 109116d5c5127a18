// The tokenizer's invariants on fresh random inputs (the golden tests pin known texts; these look for the ones
// nobody wrote down): any valid UTF-8 text decodes back to itself, and streaming any id sequence adds up to
// Tokenizer::decode with every chunk valid UTF-8.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "server/incremental_detokenizer.h"
#include "server/tokenizer_test_util.h"
#include "server/utf8.h"
#include "test_seed.h"

namespace moeserve::server {
namespace {

using testing::deepseek_tokenizer;

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}

std::vector<int32_t> added_token_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (size_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_added(int32_t(id))) ids.push_back(int32_t(id));
  return ids;
}

std::vector<std::string> added_token_texts(const Tokenizer& tok) {
  std::vector<std::string> texts;
  for (int32_t id : added_token_ids(tok)) texts.push_back(*tok.id_to_token(id));
  return texts;
}

// Text built from pieces the pre-tokenizer and the added-token matcher treat differently: runs of ASCII words,
// digits and punctuation, every kind of whitespace, accented and combining letters, CJK, emoji with joiners and
// variation selectors, control characters, any scalar value of any plane, and whole or cut added tokens.
std::string random_text(std::mt19937_64& g, const std::vector<std::string>& added) {
  static const std::vector<std::string> pieces = {
      " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2028", "'s", "'S", "'ll", "don't", "123", "4567",
      "3.14", "...", "!?", "()", "{\"a\": 1}", "é", "e\u0301", "ß", "Ω", "中文", "日本語", "한국어", "مرحبا", "😀",
      "👨\u200d👩\u200d👧", "🏳\ufe0f\u200d🌈", "🇫🇷", "\x01", "\x7f", "\uFFFD", "\uFEFF", "▁", "Ġ", "<", "｜", ">"};
  std::string s;
  const int n = std::uniform_int_distribution<int>(0, 24)(g);
  for (int i = 0; i < n; ++i) {
    switch (std::uniform_int_distribution<int>(0, 5)(g)) {
      case 0: {
        const int len = std::uniform_int_distribution<int>(1, 8)(g);
        for (int k = 0; k < len; ++k) s += char(std::uniform_int_distribution<int>(0x20, 0x7e)(g));
        break;
      }
      case 1:
      case 2:
        s += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(g)];
        break;
      case 3: {  // any scalar value: the BMP half the time, the other planes the rest
        uint32_t cp = std::uniform_int_distribution<uint32_t>(0, g() % 2 ? 0xFFFF : 0x10FFFF)(g);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp -= 0x800;  // surrogates are not scalar values
        append_utf8(s, cp);
        break;
      }
      case 4:
        if (!added.empty()) s += added[std::uniform_int_distribution<size_t>(0, added.size() - 1)(g)];
        break;
      case 5:
        if (!added.empty()) {  // an added token missing its last character: plain text, not the token
          std::string a = added[std::uniform_int_distribution<size_t>(0, added.size() - 1)(g)];
          while (!a.empty() && (uint8_t(a.back()) & 0xC0) == 0x80) a.pop_back();
          if (!a.empty()) a.pop_back();
          s += a;
        }
        break;
    }
  }
  return s;
}

TEST(TokenizerRandom, AnyValidTextDecodesBackToItself) {
  const auto& tok = deepseek_tokenizer();
  const auto added = added_token_texts(tok);
  ASSERT_FALSE(added.empty());
  auto g = moeserve::testing::seeded();
  for (int i = 0; i < 3000; ++i) {
    const std::string text = random_text(g, added);
    ASSERT_TRUE(utf8::is_valid(text)) << "generator bug";
    const auto ids = tok.encode(text);
    for (int32_t id : ids) ASSERT_TRUE(tok.is_token(id)) << "encode gave id " << id << " for " << text;
    ASSERT_EQ(tok.decode(ids), text) << "case " << i;
  }
}

TEST(TokenizerRandom, InvalidUtf8IsRefusedWithAnError) {
  const auto& tok = deepseek_tokenizer();
  auto g = moeserve::testing::seeded();
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(std::uniform_int_distribution<size_t>(1, 16)(g), '\0');
    for (char& c : bytes) c = char(g());
    if (utf8::is_valid(bytes)) {
      EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
    } else {
      EXPECT_THROW(tok.encode(bytes), Error) << "case " << i;
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);  // random bytes are mostly not UTF-8: the refusal path was taken
}

// Ids drawn so that byte-level fragments of characters, added tokens and ids outside the vocabulary all occur.
TEST(TokenizerRandom, StreamingAnyIdsAddsUpToDecode) {
  const auto& tok = deepseek_tokenizer();
  const auto emoji = tok.encode("😀👨\u200d👩\u200d👧中文");
  const std::vector<int32_t> added = added_token_ids(tok);
  auto g = moeserve::testing::seeded();
  for (int i = 0; i < 2000; ++i) {
    std::vector<int32_t> ids(std::uniform_int_distribution<size_t>(0, 32)(g));
    for (auto& id : ids) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(g);
      if (kind < 5) id = std::uniform_int_distribution<int32_t>(0, int32_t(tok.vocab_size()) - 1)(g);
      else if (kind < 8) id = emoji[std::uniform_int_distribution<size_t>(0, emoji.size() - 1)(g)];
      else if (kind < 9) id = added[std::uniform_int_distribution<size_t>(0, added.size() - 1)(g)];
      else id = std::uniform_int_distribution<int32_t>(-3, int32_t(tok.vocab_size()) + 3)(g);
    }
    std::vector<int32_t> tokens;  // decode refuses non-tokens; the detokenizer skips them
    for (int32_t id : ids)
      if (tok.is_token(id)) tokens.push_back(id);
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok, skip);
      std::string text;
      for (int32_t id : ids) {
        const std::string chunk = detok.push(id);
        ASSERT_TRUE(utf8::is_valid(chunk)) << "case " << i << ": broken UTF-8 emitted after id " << id;
        text += chunk;
      }
      text += detok.flush();
      ASSERT_EQ(text, tok.decode(tokens, skip)) << "case " << i << " skip_special " << skip;
    }
  }
}

}  // namespace
}  // namespace moeserve::server
