// `moeserve bench` against the real `moeserve serve` on the built-in demo model: no failed requests,
// exact token totals (ignore_eos forces the requested lengths), the tokenizer found from the served
// model name, completions and chat.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace moeserve::bench {
namespace {

class DemoServer {
 public:
  DemoServer() {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      execl(moeserve::testing::binary().c_str(), "moeserve", "--log-level", "warn", "serve", "--port", "0",
            "--max-model-len", "512", "--cpu-memory-gib", "0.5", nullptr);
      _exit(127);
    }
    close(out[1]);
    stdout_ = fdopen(out[0], "r");
    char line[512];
    while (stdout_ && fgets(line, sizeof(line), stdout_)) {  // "moeserve: listening on http://127.0.0.1:PORT"
      std::smatch m;
      const std::string s(line);
      if (std::regex_search(s, m, std::regex("listening on (http://[0-9.]+:[0-9]+)"))) {
        url_ = m[1];
        break;
      }
    }
  }
  ~DemoServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      bool exited = false;
      for (int i = 0; i < 1000 && !exited; ++i) {  // 10 s for a clean shutdown, then SIGKILL
        exited = waitpid(pid_, &status, WNOHANG) == pid_;
        if (!exited) usleep(10000);
      }
      if (!exited) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
    }
    if (stdout_) fclose(stdout_);
  }
  const std::string& url() const { return url_; }

 private:
  pid_t pid_ = -1;
  FILE* stdout_ = nullptr;
  std::string url_;
};

struct BenchResult {
  int status = 0;
  std::string out, err;
};

// `moeserve bench ARGS`, killed after 120 s so that a stuck server fails the test instead of hanging it.
BenchResult run_bench(const std::string& args) {
  auto r = moeserve::testing::run_moeserve("bench " + args, "timeout -s INT -k 10 120");
  return {r.exit_code, r.out, r.err};
}

TEST(BenchRealServer, DemoModelRunHasNoFailedRequests) {
  DemoServer server;
  ASSERT_FALSE(server.url().empty()) << "moeserve serve did not start";
  moeserve::testing::TempDir dir;
  const std::string file = dir.file("real.jsonl");
  const auto completions = run_bench(
      "--base-url " + server.url() +
      " --num-prompts 8 --random-input-len 48 --random-output-len 12 --random-range-ratio 1 --max-concurrency 4"
      " --disable-tqdm --output-file " + file);
  ASSERT_EQ(completions.status, 0) << "(130: stopped after 120 s)\n" << completions.out << completions.err;
  EXPECT_NE(completions.out.find("Successful requests:                     8 "), std::string::npos) << completions.out;
  EXPECT_EQ(completions.out.find("Failed requests"), std::string::npos) << completions.out;
  EXPECT_NE(completions.out.find("Total input tokens:                      376 "), std::string::npos)  // 8 × (48 − BOS)
      << completions.out;
  EXPECT_NE(completions.out.find("Total generated tokens:                  96 "), std::string::npos) << completions.out;

  const auto chat = run_bench(
      "--backend sglang-oai-chat --base-url " + server.url() +
      " --num-prompts 4 --random-input-len 32 --random-output-len 8 --random-range-ratio 1 --request-rate 20"
      " --disable-tqdm --output-file " + file);
  ASSERT_EQ(chat.status, 0) << "(130: stopped after 120 s)\n" << chat.out << chat.err;
  EXPECT_NE(chat.out.find("Successful requests:                     4 "), std::string::npos) << chat.out;
  EXPECT_EQ(chat.out.find("Failed requests"), std::string::npos) << chat.out;

  std::ifstream in(file);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["completed"], 8);
  EXPECT_EQ(lines[0]["failed"], 0);
  EXPECT_EQ(lines[0]["total_output_tokens"], 96);
  EXPECT_EQ(lines[0]["total_output_tokens_retokenized"].is_number(), true);
  EXPECT_EQ(lines[0]["model"], "demo");
  EXPECT_GT(lines[0]["mean_ttft_ms"].get<double>(), 0.0);
  EXPECT_GT(lines[0]["mean_itl_ms"].get<double>(), 0.0);
  EXPECT_EQ(lines[1]["backend"], "sglang-oai-chat");
  EXPECT_EQ(lines[1]["completed"], 4);
  EXPECT_EQ(lines[1]["total_output_tokens"], 32);
}

}  // namespace
}  // namespace moeserve::bench
