// Split behaviors and the ByteLevel (GPT-2) pattern, checked against the examples in HF's docs.
#include "server/pre_tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moeserve::server {
namespace {

std::vector<std::string> pieces(const nlohmann::json& json, const std::string& text) {
  const auto pre = PreTokenizer::from_json(json);
  std::vector<Span> spans;
  pre.split(text, {0, text.size(), false}, spans);
  std::vector<std::string> out;
  for (const auto& s : spans) out.push_back((s.prefix_space ? "^" : "") + text.substr(s.begin, s.end - s.begin));
  return out;
}

nlohmann::json split(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, SplitBehaviorsMatchHfDocs) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pieces(split("Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(split("Isolated"), text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(split("MergedWithPrevious"), text), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(split("MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(split("Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizer, SplitInvertKeepsTheMatchesAsContent) {
  // Inverted: the non-matches ("-") are what gets removed.
  EXPECT_EQ(pieces(split("Removed", true), "the-final--countdown"), (Pieces{"-", "-", "-"}));
  const nlohmann::json regex = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_EQ(pieces(regex, "ab1234567c"), (Pieces{"ab", "123", "456", "7", "c"}));
}

TEST(PreTokenizer, ByteLevelUsesTheGpt2Pattern) {
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(pieces(byte_level, "Hello  world's 123\n\n x"),
            (Pieces{"Hello", " ", " world", "'s", " 123", "\n\n", " x"}));
  EXPECT_EQ(pieces(byte_level, "I'm ok!?"), (Pieces{"I", "'m", " ok", "!?"}));
  EXPECT_EQ(pieces(byte_level, "Ünïcödé 中文"), (Pieces{"Ünïcödé", " 中文"}));
}

TEST(PreTokenizer, ByteLevelPrefixSpaceIsPrependedBeforeSplitting) {
  const nlohmann::json prefixed = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pieces(prefixed, "hello world"), (Pieces{"^hello", " world"}));
  EXPECT_EQ(pieces(prefixed, " hello"), (Pieces{" hello"}));
  // " \nfoo": the space stays alone because the \s+(?!\S) branch backs off before "\n".
  EXPECT_EQ(pieces(prefixed, "\nfoo"), (Pieces{"^", "\n", "foo"}));
  const nlohmann::json no_regex = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(pieces(no_regex, "a b"), (Pieces{"^a b"}));
}

TEST(PreTokenizer, SequenceAppliesSplitsInOrder) {
  const nlohmann::json seq = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(pieces(seq, "ab 12345 cd"), (Pieces{"ab", "123", "45", "cd"}));
}

TEST(PreTokenizer, RejectsUnsupportedConfigurations) {
  EXPECT_THROW(PreTokenizer::from_json({{"type", "Metaspace"}}), Error);
  EXPECT_THROW(PreTokenizer::from_json(split("Sideways")), Error);
  EXPECT_THROW(PreTokenizer::from_json(
                   {{"type", "Split"}, {"pattern", {{"Regex", "[unclosed"}}}, {"behavior", "Isolated"}}),
               Error);
  const nlohmann::json byte_level_first = {
      {"type", "Sequence"}, {"pretokenizers", {{{"type", "ByteLevel"}}, split("Isolated")}}};
  EXPECT_THROW(PreTokenizer::from_json(byte_level_first), Error);
  try {
    PreTokenizer::from_json({{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}}}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "pre_tokenizer.pretokenizers[0].type: unsupported pre-tokenizer 'Whitespace' (supported: Sequence, "
                 "Split, ByteLevel)");
  }
}

}  // namespace
}  // namespace moeserve::server
