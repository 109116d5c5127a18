#pragma once
// Runs the built moeserve binary with arguments and captures exit status, stdout and stderr.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "temp_dir.h"
#include "test_paths.h"

namespace moeserve::testing {

struct CommandResult {
  int status = 0;     // raw std::system status; 0 means exit code 0
  int exit_code = 0;  // the process's exit code (-1 when it did not exit normally)
  std::string out, err;
};

// `wrapper` runs before the binary, e.g. "timeout -s INT -k 10 120".
inline CommandResult run_moeserve(const std::string& args, const std::string& wrapper = "") {
  TempDir dir;
  std::string cmd = (wrapper.empty() ? "" : wrapper + " ") + binary() + " " + args + " >" + dir.file("out") + " 2>" +
                    dir.file("err");
  CommandResult r;
  r.status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1;
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  r.out = slurp(dir.file("out"));
  r.err = slurp(dir.file("err"));
  return r;
}

}  // namespace moeserve::testing
