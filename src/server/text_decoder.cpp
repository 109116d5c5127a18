#include "server/text_decoder.h"

#include "server/incremental_detokenizer.h"

namespace moeserve::server {

namespace {
class Decoder : public engine::IncrementalTextDecoder {
 public:
  Decoder(std::shared_ptr<const Tokenizer> tokenizer, bool skip)
      : tokenizer_(std::move(tokenizer)), detokenizer_(*tokenizer_, skip) {}
  std::string push(int32_t id) override { return detokenizer_.push(id); }
  std::string flush() override { return detokenizer_.flush(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;  // keeps the tokenizer alive for the detokenizer
  IncrementalDetokenizer detokenizer_;
};
}  // namespace

std::unique_ptr<engine::IncrementalTextDecoder> TokenizerTextDecoderFactory::start(bool skip_special_tokens) const {
  return std::make_unique<Decoder>(tokenizer_, skip_special_tokens);
}

}  // namespace moeserve::server
