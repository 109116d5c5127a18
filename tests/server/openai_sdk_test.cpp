// End to end: `moeserve serve` (the real binary, demo model) driven by the official OpenAI Node SDK.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include "test_paths.h"

namespace moeserve {
namespace {

TEST(OpenAiSdk, DrivesTheRealServer) {
  const std::string sdk = testing::source_dir() + "/node_modules/openai";
  ASSERT_TRUE(std::filesystem::exists(sdk)) << "run scripts/setup.sh (npm install) first";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(testing::binary().c_str(), "moeserve", "--log-level", "warn", "serve", "--port", "0", "--served-model-name",
          "demo", "--max-model-len", "512", "--cpu-memory-gib", "0.5", nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char line[512] = {0};
  std::string url;
  while (fgets(line, sizeof(line), f)) {  // "moeserve: listening on http://127.0.0.1:PORT"
    std::smatch m;
    std::string s(line);
    if (std::regex_search(s, m, std::regex("listening on (http://[0-9.]+:[0-9]+)"))) {
      url = m[1];
      break;
    }
  }
  ASSERT_FALSE(url.empty()) << "the server did not start";
  std::string cmd = "node " + testing::source_dir() + "/tests/server/openai_sdk_check.mjs " + url + "/v1 2>&1";
  FILE* node = popen(cmd.c_str(), "r");
  std::string output;
  while (fgets(line, sizeof(line), node)) output += line;
  int status = pclose(node);
  kill(pid, SIGTERM);
  int server_status = 0;
  waitpid(pid, &server_status, 0);
  fclose(f);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("openai sdk checks passed"), std::string::npos) << output;
  EXPECT_TRUE(WIFEXITED(server_status) && WEXITSTATUS(server_status) == 0) << "server did not stop cleanly";
}

}  // namespace
}  // namespace moeserve
