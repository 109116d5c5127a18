// moeserve tokenize (--model DIR | --tokenizer FILE) (--text TEXT | --input-file FILE)
// Prints {"ids": [...]}: the text's token ids, no special tokens added (added tokens written in the
// text, such as <｜User｜>, are still recognised).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"
#include "server/utf8.h"

namespace moeserve::cli {
namespace {

struct Options {
  TokenizerSource source;
  std::string text;
  std::string input_file;
};

std::string read_input(const Options& options, CLI::App& app) {
  const bool has_text = app.count("--text") > 0;
  check(has_text != !options.input_file.empty(), "exactly one of --text TEXT or --input-file FILE is required");
  std::string text = options.text;
  std::string where = "--text";
  if (!has_text) {
    std::ifstream file(options.input_file, std::ios::binary);
    check(file.good() && !std::filesystem::is_directory(options.input_file), "--input-file: cannot open {}",
          options.input_file);
    std::stringstream buffer;
    buffer << file.rdbuf();
    text = buffer.str();
    where = options.input_file;
  }
  size_t bad = 0;
  check(server::utf8::is_valid(text, &bad), "{}: invalid UTF-8 at byte {}", where, bad);
  return text;
}

CommandRegistration tokenize{{"tokenize", "print the token ids of a text", [](CLI::App& app) {
                                auto options = std::make_shared<Options>();
                                add_tokenizer_options(app, options->source);
                                auto* text = app.add_option("--text", options->text, "the text to tokenize");
                                auto* file = app.add_option("--input-file", options->input_file,
                                                            "a file holding the text (UTF-8)");
                                text->excludes(file);
                                return [options, &app] {
                                  const auto tokenizer = load_tokenizer(options->source);
                                  const auto ids = tokenizer.encode(read_input(*options, app));
                                  std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
                                  return 0;
                                };
                              }}};

}  // namespace
}  // namespace moeserve::cli
