#pragma once
// Runs the built moeserve binary with arguments and captures exit status, stdout and stderr.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "temp_dir.h"
#include "test_paths.h"

namespace moeserve::testing {

struct CommandResult {
  int status = 0;  // raw std::system status; 0 means exit code 0
  std::string out, err;
};

inline CommandResult run_moeserve(const std::string& args) {
  TempDir dir;
  std::string cmd = binary() + " " + args + " >" + dir.file("out") + " 2>" + dir.file("err");
  CommandResult r;
  r.status = std::system(cmd.c_str());
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  r.out = slurp(dir.file("out"));
  r.err = slurp(dir.file("err"));
  return r;
}

}  // namespace moeserve::testing
