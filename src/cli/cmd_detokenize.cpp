// moeserve detokenize (--model DIR | --tokenizer FILE) --ids 1,2,3 [--skip-special-tokens]
// Prints {"text": ...}: the ids decoded as HF does (invalid UTF-8 becomes U+FFFD).
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/parse.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"

namespace moeserve::cli {
namespace {

struct Options {
  TokenizerSource source;
  std::string ids;
  bool skip_special_tokens = false;
};

CommandRegistration detokenize{{"detokenize", "print the text of token ids", [](CLI::App& app) {
                                  auto options = std::make_shared<Options>();
                                  add_tokenizer_options(app, options->source);
                                  app.add_option("--ids", options->ids, "comma-separated token ids, e.g. 1,2,3")
                                      ->required();
                                  app.add_flag("--skip-special-tokens", options->skip_special_tokens,
                                               "leave out special tokens such as BOS/EOS");
                                  return [options] {
                                    const auto ids = parse_id_list(options->ids, "--ids");
                                    const auto tokenizer = load_tokenizer(options->source);
                                    for (size_t i = 0; i < ids.size(); ++i)
                                      check(tokenizer.is_token(ids[i]),
                                            "--ids: {} at index {} is not a token id (vocabulary size {})", ids[i], i,
                                            tokenizer.vocab_size());
                                    const auto text = tokenizer.decode(ids, options->skip_special_tokens);
                                    std::cout << nlohmann::json{{"text", text}}.dump() << "\n";
                                    return 0;
                                  };
                                }}};

}  // namespace
}  // namespace moeserve::cli
