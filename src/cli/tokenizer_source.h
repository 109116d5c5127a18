#pragma once
// The tokenizer flags shared by `moeserve tokenize` and `moeserve detokenize`:
// --model DIR (DIR/tokenizer.json plus DIR/tokenizer_config.json if present) or --tokenizer FILE.
#include <string>

#include <CLI/CLI.hpp>

#include "server/tokenizer.h"

namespace moeserve::cli {

struct TokenizerSource {
  std::string model_dir;
  std::string tokenizer_file;
};

void add_tokenizer_options(CLI::App& app, TokenizerSource& source);

// Throws moeserve::Error naming the flag or the file.
server::Tokenizer load_tokenizer(const TokenizerSource& source);

}  // namespace moeserve::cli
