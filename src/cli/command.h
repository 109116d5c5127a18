#pragma once
// Subcommands of the `moeserve` binary. Each lives in its own cmd_<name>.cpp and registers itself
// with a static CommandRegistration; main.cpp parses argv with CLI11 and runs the chosen one.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace moeserve::cli {

struct Command {
  std::string name;
  std::string help;
  // Adds the subcommand's options to `app`; returns the function that runs it (exit code).
  std::function<std::function<int()>(CLI::App& app)> setup;
};

std::vector<Command>& commands();

struct CommandRegistration {
  explicit CommandRegistration(Command command) { commands().push_back(std::move(command)); }
};

}  // namespace moeserve::cli
