#pragma once
// The engine turns token ids into text incrementally (for streaming and stop strings) through this
// interface; the server implements it with the model's tokenizer. Keeps the engine below the server layer.
#include <cstdint>
#include <memory>
#include <string>

namespace moeserve::engine {

class IncrementalTextDecoder {
 public:
  virtual ~IncrementalTextDecoder() = default;
  // Text that token `id` completes (never a broken UTF-8 sequence).
  virtual std::string push(int32_t id) = 0;
  // Whatever is held back at the end of the stream.
  virtual std::string flush() = 0;
};

class TextDecoderFactory {
 public:
  virtual ~TextDecoderFactory() = default;
  virtual std::unique_ptr<IncrementalTextDecoder> start(bool skip_special_tokens) const = 0;
};

}  // namespace moeserve::engine
