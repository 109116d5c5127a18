#include <iostream>

#include "cli/command.h"

namespace moeserve::cli {
namespace {
CommandRegistration version{{"version", "print the version", [](CLI::App&) {
                               return [] {
                                 std::cout << "moeserve 0.1.0\n";
                                 return 0;
                               };
                             }}};
}  // namespace
}  // namespace moeserve::cli
