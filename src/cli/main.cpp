// moeserve: serve | generate | bench | plan | convert | tokenize | detokenize.
// Errors from the library arrive as moeserve::Error and become one message on stderr and exit code 1.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace moeserve::cli {
std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}
}  // namespace moeserve::cli

int main(int argc, char** argv) {
  using namespace moeserve;
  CLI::App app{"moeserve: a DeepSeek-V4 serving engine for Hopper GPUs"};
  app.require_subcommand(1);
  std::string log_level = std::getenv("MOESERVE_LOG_LEVEL") ? std::getenv("MOESERVE_LOG_LEVEL") : "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->check(
      CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  auto& list = cli::commands();
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& command : list) {
    CLI::App* sub = app.add_subcommand(command.name, command.help);
    runners[sub] = command.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  init_logging(log_level);
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const Error& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
  }
  return 1;
}
