#include "cli/tokenizer_source.h"

#include <filesystem>

#include "core/error.h"

namespace moeserve::cli {

void add_tokenizer_options(CLI::App& app, TokenizerSource& source) {
  auto* model = app.add_option("--model", source.model_dir, "model directory holding tokenizer.json");
  auto* tokenizer = app.add_option("--tokenizer", source.tokenizer_file, "an HF tokenizer.json file");
  model->excludes(tokenizer);
}

server::Tokenizer load_tokenizer(const TokenizerSource& source) {
  check(!source.model_dir.empty() || !source.tokenizer_file.empty(),
        "one of --model DIR or --tokenizer FILE is required");
  if (!source.model_dir.empty()) {
    check(std::filesystem::is_directory(source.model_dir), "--model: {} is not a directory", source.model_dir);
    return server::Tokenizer::load(source.model_dir);
  }
  check(!std::filesystem::is_directory(source.tokenizer_file),
        "--tokenizer: {} is a directory (expected a tokenizer.json file; use --model for a directory)",
        source.tokenizer_file);
  return server::Tokenizer::load(source.tokenizer_file);
}

}  // namespace moeserve::cli
