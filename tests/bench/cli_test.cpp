// `moeserve bench` as a user runs it: the binary against the scripted server, bad flags, an
// unreachable server, a sweep with plots, and Ctrl-C.
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sanitizer_build.h"
#include "scripted_server.h"
#include "temp_dir.h"
#include "test_paths.h"

extern char** environ;

namespace moeserve::bench {
namespace {
namespace fs = std::filesystem;
using testing::make_script;
using testing::ScriptedServer;

struct Child {
  pid_t pid = -1;
  fs::path out, err;
};

using moeserve::testing::TempDir;

Child spawn(const std::vector<std::string>& args, const fs::path& dir) {
  Child c{-1, dir / "stdout.txt", dir / "stderr.txt"};
  std::vector<std::string> argv_s = {moeserve::testing::binary(), "bench"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_EQ(posix_spawn(&c.pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return c;
}

int wait_for(const Child& c) {
  int status = 0;
  waitpid(c.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Result {
  int rc;
  std::string out, err;
};

Result run(const std::vector<std::string>& args) {
  TempDir dir;
  const Child c = spawn(args, dir.path());
  const int rc = wait_for(c);
  return {rc, slurp(c.out), slurp(c.err)};
}

std::vector<std::string> small_run(const ScriptedServer& server) {
  return {"--base-url", server.base_url(), "--dataset-name", "random-ids", "--vocab-size", "1000",
          "--num-prompts", "6", "--random-input-len", "16", "--random-output-len", "8", "--random-range-ratio", "1",
          "--warmup-requests", "0", "--disable-tqdm"};
}

TEST(BenchCli, RunsAgainstAServerPrintsTheBlockAndAppendsJson) {
  ScriptedServer server;
  TempDir dir;
  const std::string file = dir.file("out.jsonl");
  auto args = small_run(server);
  args.insert(args.end(), {"--output-file", file, "--max-concurrency", "3", "--slo-ttft", "1000"});
  const Result r = run(args);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("============ Serving Benchmark Result ============"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Successful requests:                     6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total input tokens:                      96"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total generated tokens:                  48"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Request goodput (req/s):"), std::string::npos) << r.out;
  const auto second = run(args);  // appends a second line
  ASSERT_EQ(second.rc, 0) << second.err;
  std::ifstream f(file);
  std::string line;
  int lines = 0;
  while (std::getline(f, line)) {
    ++lines;
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["completed"], 6);
    EXPECT_EQ(j["total_input_tokens"], 96);
    EXPECT_EQ(j["total_output_tokens"], 48);
    EXPECT_EQ(j["max_concurrency"], 3);
    EXPECT_EQ(j["model"], "scripted-model");  // from GET /v1/models
    EXPECT_EQ(j["good_completed"], 6);
    EXPECT_GE(j["mean_ttft_ms"].get<double>(), 50.0);
    for (const char* key : {"duration", "request_throughput", "p95_itl_ms", "median_tpot_ms", "concurrency"})
      EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(lines, 2);
}

TEST(BenchCli, TextPromptsFromTheDemoTokenizer) {
  ScriptedServer server;
  const Result r = run({"--base-url", server.base_url(), "--backend", "sglang-oai-chat", "--tokenizer",
                        moeserve::testing::source_dir() + "/models/demo", "--num-prompts", "3", "--random-input-len",
                        "32", "--random-output-len", "8", "--random-range-ratio", "1", "--warmup-requests", "1"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Backend:                                 sglang-oai-chat"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total input tokens:                      93"), std::string::npos) << r.out;  // 3 × (32 − BOS)
  EXPECT_EQ(r.out.find("(retokenized):    n/a"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("Warmup completed with 1 sequences"), std::string::npos) << r.err;
  const auto bodies = server.requests();
  ASSERT_EQ(bodies.size(), 4u);  // warmup + 3
  EXPECT_EQ(bodies[0]["max_completion_tokens"], 8);
  EXPECT_TRUE(bodies[1]["messages"][0]["content"].is_string());
}

TEST(BenchCli, ServerFaultsAreCountedAndReported) {
  ScriptedServer server;
  auto drop = make_script(20, 10, {1, 1, 1});
  drop.drop_after_chunks = 1;
  server.set_default_script(drop);
  const Result r = run(small_run(server));
  EXPECT_EQ(r.rc, 1) << r.out << r.err;  // every request failed
  EXPECT_NE(r.out.find("Successful requests:                     0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Failed requests:                         6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("First failure (6 failed):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("All requests failed"), std::string::npos) << r.out;
}

TEST(BenchCli, UnreachableServerAndBadFlagsExitWithAMessage) {
  const Result unreachable = run({"--port", "1", "--dataset-name", "random-ids", "--vocab-size", "10"});
  EXPECT_NE(unreachable.rc, 0);
  EXPECT_NE(unreachable.err.find("cannot reach the server at http://127.0.0.1:1"), std::string::npos)
      << unreachable.err;
  ScriptedServer up;
  const Result no_dir = run({"--base-url", up.base_url(), "--dataset-name", "random-ids", "--vocab-size", "10",
                             "--output-file", "/nonexistent-dir/x.jsonl"});
  EXPECT_NE(no_dir.rc, 0);
  EXPECT_NE(no_dir.err.find("--output-file: cannot open '/nonexistent-dir/x.jsonl'"), std::string::npos) << no_dir.err;
  EXPECT_TRUE(up.requests().empty());  // nothing was sent
  const Result bad = run({"--backend", "openai-chat", "--dataset-name", "random-ids"});
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("only the completions API"), std::string::npos) << bad.err;
  const Result unknown = run({"--request-rates", "3"});
  EXPECT_NE(unknown.rc, 0);
  EXPECT_NE(unknown.err.find("--request-rates"), std::string::npos) << unknown.err;
  ScriptedServer server;
  const Result no_tokenizer = run({"--base-url", server.base_url(), "--num-prompts", "2"});
  EXPECT_NE(no_tokenizer.rc, 0);
  EXPECT_NE(no_tokenizer.err.find("pass --tokenizer"), std::string::npos) << no_tokenizer.err;
}

TEST(BenchCli, SweepWritesTheFrontierTableAndPlots) {
  ScriptedServer server;
  server.set_default_script(make_script(10, 5, {1, 1, 2, 1}));
  TempDir dir;
  const fs::path plots = dir.path() / "sweep";
  auto args = small_run(server);
  args.insert(args.end(), {"--max-concurrency", "1,2,4", "--plot-dir", plots.string(), "--num-gpus", "2"});
  const Result r = run(args);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Concurrency Sweep"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tok/s/GPU"), std::string::npos);
  size_t blocks = 0;
  for (size_t pos = 0; (pos = r.out.find("Serving Benchmark Result", pos)) != std::string::npos; ++pos) ++blocks;
  EXPECT_EQ(blocks, 3u);
  for (const char* f : {"frontier.tsv", "sweep.dat", "ttft_vs_concurrency.gp", "tpot_vs_concurrency.gp", "frontier.gp"})
    EXPECT_TRUE(fs::exists(plots / f)) << f;
  const std::string tsv = slurp(plots / "frontier.tsv");
  EXPECT_EQ(std::count(tsv.begin(), tsv.end(), '\n'), 4);  // header + 3 levels
  if (r.out.find("No PNG plots") == std::string::npos) {
    for (const char* f : {"ttft_vs_concurrency.png", "tpot_vs_concurrency.png", "frontier.png"})
      EXPECT_GT(fs::file_size(plots / f), 1000u) << f;
  }
}

TEST(BenchCli, CtrlCPrintsWhatWasMeasuredAndExits) {
  ScriptedServer server;
  server.set_default_script(make_script(20, 20, std::vector<int>(150, 1)));  // 3 s streams
  TempDir dir;
  auto args = small_run(server);
  args.insert(args.end(), {"--max-concurrency", "2"});
  const Child c = spawn(args, dir.path());
  // Wait until the benchmark has requests in flight, then interrupt.
  for (int i = 0; i < 500 && server.requests().size() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  kill(c.pid, SIGINT);
  const int rc = wait_for(c);
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string out = slurp(c.out);
  EXPECT_EQ(rc, 130) << out << slurp(c.err);
  if (!moeserve::testing::kSanitizerBuild) EXPECT_LT(exit_s, 1.0);
  EXPECT_NE(out.find("Serving Benchmark Result"), std::string::npos) << out;
  EXPECT_NE(out.find("Cancelled requests (Ctrl-C):             6"), std::string::npos) << out;
}

}  // namespace
}  // namespace moeserve::bench
