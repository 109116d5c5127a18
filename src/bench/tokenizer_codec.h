#pragma once
// The benchmark's view of a model tokenizer (server::Tokenizer): --tokenizer, or --model when it is a
// local path, names a tokenizer.json or a directory holding one.
#include <memory>
#include <string>

#include "bench/dataset.h"

namespace moeserve::bench {

// Throws moeserve::Error naming the path when it holds no loadable tokenizer.
std::unique_ptr<TokenCodec> load_token_codec(const std::string& path);

}  // namespace moeserve::bench
