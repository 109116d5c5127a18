#include "bench/tokenizer_codec.h"

#include <filesystem>

#include "core/error.h"
#include "server/tokenizer.h"

namespace moeserve::bench {
namespace {
class TokenizerCodec final : public TokenCodec {
 public:
  explicit TokenizerCodec(server::Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {
    specials_ = tokenizer_.encode("", /*add_special_tokens=*/true).size();
  }
  std::vector<int32_t> encode(std::string_view text) const override { return tokenizer_.encode(text, false); }
  std::string decode(std::span<const int32_t> ids) const override { return tokenizer_.decode(ids, false); }
  size_t vocab_size() const override { return tokenizer_.vocab_size(); }
  size_t num_special_tokens_to_add() const override { return specials_; }
  // Ordinary tokens that decode to whole characters on their own: a token holding part of a UTF-8
  // sequence decodes to U+FFFD next to a stranger and re-encodes to different tokens, which makes exact
  // prompt lengths take more rounds (or miss).
  std::vector<int32_t> ordinary_ids() const override {
    constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    std::vector<int32_t> ids;
    for (size_t id = 0; id < tokenizer_.vocab_size(); ++id) {
      const auto i = static_cast<int32_t>(id);
      if (!tokenizer_.is_token(i) || tokenizer_.is_added(i)) continue;
      const std::string text = tokenizer_.decode(std::span<const int32_t>(&i, 1));
      if (!text.empty() && text.find(kReplacement) == std::string::npos) ids.push_back(i);
    }
    return ids;
  }

 private:
  server::Tokenizer tokenizer_;
  size_t specials_ = 0;
};
}  // namespace

std::unique_ptr<TokenCodec> load_token_codec(const std::string& path) {
  check(std::filesystem::exists(path), "--tokenizer: '{}' does not exist", path);
  return std::make_unique<TokenizerCodec>(server::Tokenizer::load(path));
}

}  // namespace moeserve::bench
