// The DeepSeek-V3 tokenizer against HF `tokenizers` goldens, plus the tokenizer's public contract.
#include "server/tokenizer.h"

#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "server/tokenizer_test_util.h"

namespace moeserve::server {
namespace {

using testing::deepseek_tokenizer;
using testing::goldens;

std::vector<int32_t> ids_of(const nlohmann::json& json) { return json.get<std::vector<int32_t>>(); }

TEST(Tokenizer, EncodesEveryGoldenTextExactly) {
  const auto& tok = deepseek_tokenizer();
  const auto& cases = goldens()["encode"];
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    const auto text = c["text"].get<std::string>();
    EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << "text: " << text;
  }
}

TEST(Tokenizer, DecodeMatchesGoldensAndRoundTrips) {
  const auto& tok = deepseek_tokenizer();
  for (const auto& c : goldens()["encode"]) {
    const auto text = c["text"].get<std::string>();
    EXPECT_EQ(tok.decode(ids_of(c["ids"])), c["decoded"].get<std::string>()) << "text: " << text;
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

// add_bos_token=true (tokenizer_config.json): BOS then the plain ids. The goldens'
// "encode_with_special" are HF `tokenizers`' ids with the config's BOS (tools/make_tokenizer_goldens.py).
TEST(Tokenizer, AddSpecialTokensPrependsBosPerConfig) {
  const auto& tok = deepseek_tokenizer();
  const auto& with_special = goldens()["encode_with_special"];
  ASSERT_EQ(with_special.size(), goldens()["encode"].size());
  for (const auto& c : with_special) {
    auto ids = tok.encode(c["text"].get<std::string>(), true);
    EXPECT_EQ(ids, ids_of(c["ids"])) << "text: " << c["text"];
    EXPECT_EQ(ids.front(), 0);
  }
}

TEST(Tokenizer, VocabularyAndSpecialTokens) {
  const auto& tok = deepseek_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 128815u);
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.bos_token(), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok.eos_token(), "<｜end▁of▁sentence｜>");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_EQ(tok.token_to_id("<｜User｜>"), 128803);
  EXPECT_FALSE(tok.is_special(128803));  // an added token, but not special: kept by skip_special_tokens
  EXPECT_TRUE(tok.is_added(128803));
  EXPECT_EQ(tok.token_to_id("Ġthe"), tok.encode(" the").at(0));
  EXPECT_EQ(tok.id_to_token(tok.encode(" the").at(0)), "Ġthe");
  EXPECT_EQ(tok.id_to_token(-1), std::nullopt);
  EXPECT_EQ(tok.id_to_token(128815), std::nullopt);
  EXPECT_FALSE(tok.chat_template().empty());
}

TEST(Tokenizer, SkipSpecialTokensKeepsNonSpecialAddedTokens) {
  const auto& tok = deepseek_tokenizer();
  const std::string text = "<｜begin▁of▁sentence｜>Hi<｜User｜>there<｜end▁of▁sentence｜>";
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(tok.decode(ids, false), text);
  EXPECT_EQ(tok.decode(ids, true), "Hi<｜User｜>there");
}

TEST(Tokenizer, AddedTokensAreMatchedLongestFirstAndOnlyWhole) {
  const auto& tok = deepseek_tokenizer();
  // A half token is plain text; the whole one is a single id even when glued to words.
  const auto partial = tok.encode("<｜User");
  EXPECT_GT(partial.size(), 1u);
  const auto glued = tok.encode("a<｜User｜>b");
  ASSERT_EQ(glued.size(), 3u);
  EXPECT_EQ(glued[1], 128803);
}

TEST(Tokenizer, DecodeReplacesBrokenUtf8LikeHf) {
  const auto& tok = deepseek_tokenizer();
  const auto ids = tok.encode("😀");  // several byte-level tokens; a prefix of them is a broken sequence
  ASSERT_GT(ids.size(), 1u);
  const std::vector<int32_t> head(ids.begin(), ids.end() - 1);
  EXPECT_EQ(tok.decode(head), "\xEF\xBF\xBD");
}

TEST(Tokenizer, RejectsInvalidUtf8Text) {
  const auto& tok = deepseek_tokenizer();
  try {
    tok.encode("ok\xC3(");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "text: invalid UTF-8 at byte 2");
  }
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), Error);  // a surrogate
  EXPECT_THROW(tok.encode("\xC0\xAF"), Error);      // overlong
}

TEST(Tokenizer, RejectsIdsOutsideTheVocabulary) {
  const auto& tok = deepseek_tokenizer();
  const std::vector<int32_t> ids{5, 128815};
  try {
    tok.decode(ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "ids[1]: 128815 is not a token id (vocabulary size 128815)");
  }
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

TEST(Tokenizer, LongInputsAndRepeatsAreStable) {
  const auto& tok = deepseek_tokenizer();
  std::string text;
  for (const auto& c : goldens()["encode"]) text += c["text"].get<std::string>() + "\n";
  const auto once = tok.encode(text);
  EXPECT_EQ(tok.encode(text), once);  // second pass hits the word cache
  EXPECT_EQ(tok.decode(once), text);
  const std::string long_word(5000, 'x');  // one pre-token far beyond the cache's word limit
  EXPECT_EQ(tok.decode(tok.encode(long_word)), long_word);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  // One tokenizer serves all request threads; the word cache is shared.
  const auto& tok = deepseek_tokenizer();
  const auto& cases = goldens()["encode"];
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (const auto& c : cases)
          if (tok.encode(c["text"].get<std::string>()) != c["ids"].get<std::vector<int32_t>>()) ++mismatches[t];
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace moeserve::server
