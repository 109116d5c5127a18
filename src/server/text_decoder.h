#pragma once
// The engine's incremental text decoder, backed by the model's tokenizer.
#include <memory>

#include "engine/text_decoder.h"
#include "server/tokenizer.h"

namespace moeserve::server {

class TokenizerTextDecoderFactory : public engine::TextDecoderFactory {
 public:
  explicit TokenizerTextDecoderFactory(std::shared_ptr<const Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}
  std::unique_ptr<engine::IncrementalTextDecoder> start(bool skip_special_tokens) const override;

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace moeserve::server
