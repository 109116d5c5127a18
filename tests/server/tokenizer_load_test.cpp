// A GPT-2-style byte-level BPE (what HF `tokenizers` trains: ByteLevel pre-tokenizer with the GPT-2
// pattern, special tokens as added tokens), built here by hand, and the loader's error messages.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/byte_level.h"
#include "server/tokenizer.h"

namespace moeserve::server {
namespace {

// 256 byte tokens (id = byte value), five merges, two special tokens.
nlohmann::json gpt2_style_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(byte_level::encode_byte(static_cast<unsigned char>(b)))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["ll"] = 259;
  vocab["ell"] = 260;
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 261}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}},
        {{"id", 262}, {"content", "<|pad|>"}, {"special", true}, {"normalized", false}, {"lstrip", true},
         {"rstrip", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        // Pairs in both spellings HF writes: "a b" strings (older) and [a, b] arrays (newer).
        {"merges", {"Ġ t", {"h", "e"}, "Ġt he", {"l", "l"}, "e ll"}}}},
  };
}

using Ids = std::vector<int32_t>;

TEST(TokenizerGpt2Style, MergesByRank) {
  const auto tok = Tokenizer::from_json(gpt2_style_tokenizer(), nullptr);
  EXPECT_EQ(tok.vocab_size(), 263u);
  EXPECT_EQ(tok.encode(" the"), (Ids{258}));
  // "he" (rank 1) merges before "ll" (rank 3), which leaves no "e ll" pair.
  EXPECT_EQ(tok.encode(" hello"), (Ids{32, 257, 259, 'o'}));
  EXPECT_EQ(tok.encode("ello"), (Ids{260, 'o'}));
  EXPECT_EQ(tok.encode("the\n"), (Ids{'t', 257, 10}));
  EXPECT_EQ(tok.decode(tok.encode("Ünï 中文\t!")), "Ünï 中文\t!");
}

TEST(TokenizerGpt2Style, SpecialTokensAndStrip) {
  const auto tok = Tokenizer::from_json(gpt2_style_tokenizer(), nullptr);
  EXPECT_EQ(tok.encode("the<|endoftext|> the"), (Ids{'t', 257, 261, 258}));
  // <|pad|> has lstrip and rstrip: the whitespace around it belongs to the token.
  EXPECT_EQ(tok.encode("he  <|pad|>\n he"), (Ids{257, 262, 257}));
  EXPECT_EQ(tok.decode(tok.encode("he<|endoftext|>"), true), "he");
  // No tokenizer_config.json and a ByteLevel post-processor: nothing is added.
  EXPECT_EQ(tok.encode("he", true), (Ids{257}));
  EXPECT_EQ(tok.bos_id(), std::nullopt);
}

TEST(TokenizerGpt2Style, PostProcessorTemplateAndConfigOverride) {
  auto json = gpt2_style_tokenizer();
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|pad|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}}}},
                  {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<|pad|>", {{"id", "<|pad|>"}, {"ids", {262}}, {"tokens", {"<|pad|>"}}}},
        {"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {261}}, {"tokens", {"<|endoftext|>"}}}}}}};
  EXPECT_EQ(Tokenizer::from_json(json, nullptr).encode("he", true), (Ids{262, 257, 261}));
  const nlohmann::json config = {
      {"add_bos_token", false}, {"add_eos_token", true}, {"bos_token", "<|pad|>"}, {"eos_token", "<|endoftext|>"}};
  const auto tok = Tokenizer::from_json(json, &config);
  EXPECT_EQ(tok.encode("he", true), (Ids{257, 261}));
  EXPECT_EQ(tok.bos_id(), 262);
  EXPECT_EQ(tok.eos_id(), 261);
}

TEST(TokenizerGpt2Style, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  auto json = gpt2_style_tokenizer();
  json["model"]["vocab"]["Ġhello"] = 263;
  EXPECT_EQ(Tokenizer::from_json(json, nullptr).encode(" hello"), (Ids{32, 257, 259, 'o'}));
  json["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokenizer::from_json(json, nullptr).encode(" hello"), (Ids{263}));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerLoad, ErrorsNameTheFileAndField) {
  const auto dir = std::filesystem::temp_directory_path() / ("moeserve_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "tokenizer.json";
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::binary) << text; };

  EXPECT_EQ(error_of([&] { Tokenizer::load(dir / "missing"); }), (dir / "missing").string() + ": cannot open file");
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }), path.string() + ": cannot open file");  // dir without tokenizer.json

  write("{\"model\": ");
  EXPECT_EQ(error_of([&] { Tokenizer::load(path); }).rfind(path.string() + ": invalid JSON:", 0), 0u);

  auto json = gpt2_style_tokenizer();
  json["model"]["type"] = "Unigram";
  write(json.dump());
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }),
            path.string() + ": model.type: unsupported 'Unigram' (supported: BPE)");

  json = gpt2_style_tokenizer();
  json["normalizer"] = {{"type", "NFC"}};
  write(json.dump());
  EXPECT_EQ(error_of([&] { Tokenizer::load(path); }),
            path.string() + ": normalizer.type: unsupported normalizer 'NFC' (only an empty Sequence or null is supported)");

  json = gpt2_style_tokenizer();
  json["model"]["merges"].push_back("x yz");
  write(json.dump());
  EXPECT_EQ(error_of([&] { Tokenizer::load(path); }),
            path.string() + ": model.merges[5]: \"x yz\" uses a token missing from model.vocab");

  json = gpt2_style_tokenizer();
  json["model"]["byte_fallback"] = true;
  write(json.dump());
  EXPECT_EQ(error_of([&] { Tokenizer::load(path); }),
            path.string() + ": model.byte_fallback: byte fallback is not supported (expected false)");

  json = gpt2_style_tokenizer();
  json["decoder"] = {{"type", "WordPiece"}};
  write(json.dump());
  EXPECT_EQ(error_of([&] { Tokenizer::load(path); }),
            path.string() + ": decoder.type: unsupported decoder 'WordPiece' (supported: ByteLevel)");

  write(gpt2_style_tokenizer().dump());
  std::ofstream(dir / "tokenizer_config.json") << "{\"bos_token\": \"<nope>\"}";
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }),
            (dir / "tokenizer_config.json").string() + ": bos_token \"<nope>\" is not a token");
  std::ofstream(dir / "tokenizer_config.json") << "{\"add_bos_token\": \"yes\"}";
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }),
            (dir / "tokenizer_config.json").string() + ": add_bos_token: expected a boolean");
  std::ofstream(dir / "tokenizer_config.json") << "[1,";
  EXPECT_EQ(error_of([&] { Tokenizer::load(dir); }).rfind((dir / "tokenizer_config.json").string() + ": invalid JSON:", 0),
            0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moeserve::server
