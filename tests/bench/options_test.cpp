// Flag parsing and validation: SGLang's names and defaults, and a clear message for every bad value or
// combination.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/options.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {

BenchOptions parse(std::vector<std::string> args) {
  CLI::App app;
  BenchOptions options;
  add_bench_options(app, options);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);
  return options;
}

// The message resolve_options throws for these flags ("" if none).
std::string problem(std::vector<std::string> args) {
  try {
    resolve_options(parse(std::move(args)));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BenchOptions, DefaultsFollowSglang) {
  const BenchOptions o = parse({});
  EXPECT_EQ(o.backend, "sglang-oai");
  EXPECT_EQ(o.num_prompts, 1000);
  EXPECT_EQ(o.random_input_len, 1024);
  EXPECT_EQ(o.random_output_len, 1024);
  EXPECT_EQ(o.random_range_ratio, 0.0);
  EXPECT_EQ(o.warmup_requests, 1);
  EXPECT_EQ(o.seed, 1u);
  const ResolvedOptions r = resolve_options(o);
  EXPECT_TRUE(std::isinf(r.request_rate));
  EXPECT_TRUE(r.concurrency_levels.empty());
  EXPECT_EQ(r.port, 30000);
  EXPECT_EQ(r.host, "127.0.0.1");
  EXPECT_EQ(resolve_options(parse({"--backend", "vllm"})).port, 8000);
}

TEST(BenchOptions, ParsesSglangCommandLines) {
  const BenchOptions o = parse({"--backend", "sglang-oai-chat", "--dataset-name", "random", "--random-input", "128",
                                "--random-output-len", "64", "--random-range-ratio", "1", "--num-prompt", "50",
                                "--request-rate", "4", "--burstiness", "0.5", "--max-concurrency", "1, 2,4",
                                "--port", "8123", "--slo-ttft", "200", "--slo-tpot", "20", "--extra-request-body",
                                R"({"top_k": 1})", "--disable-ignore-eos", "--seed", "7"});
  const ResolvedOptions r = resolve_options(o);
  EXPECT_EQ(o.random_input_len, 128);
  EXPECT_EQ(o.num_prompts, 50);
  EXPECT_EQ(r.request_rate, 4.0);
  EXPECT_EQ(r.concurrency_levels, (std::vector<int>{1, 2, 4}));
  EXPECT_TRUE(r.sweep());
  EXPECT_EQ(r.port, 8123);
  EXPECT_EQ(*r.slo.ttft_ms, 200.0);
  EXPECT_EQ(*r.slo.tpot_ms, 20.0);
  EXPECT_FALSE(r.slo.e2e_ms.has_value());
  EXPECT_EQ(r.extra_body_json, R"({"top_k":1})");
  EXPECT_TRUE(o.disable_ignore_eos);
  EXPECT_EQ(o.seed, 7u);
}

TEST(BenchOptions, RejectsBadValuesWithMessagesNamingTheFlag) {
  EXPECT_NE(problem({"--backend", "sglang"}).find("--backend 'sglang' is not supported"), std::string::npos);
  EXPECT_NE(problem({"--dataset-name", "sharegpt"}).find("--dataset-name 'sharegpt'"), std::string::npos);
  EXPECT_NE(problem({"--num-prompts", "0"}).find("--num-prompts"), std::string::npos);
  EXPECT_NE(problem({"--random-input-len", "0"}).find("--random-input-len"), std::string::npos);
  EXPECT_NE(problem({"--random-range-ratio", "1.5"}).find("--random-range-ratio"), std::string::npos);
  EXPECT_NE(problem({"--request-rate", "fast"}).find("--request-rate"), std::string::npos);
  EXPECT_NE(problem({"--request-rate", "0"}).find("--request-rate must be positive"), std::string::npos);
  EXPECT_NE(problem({"--request-rate", "-3"}).find("--request-rate"), std::string::npos);
  EXPECT_NE(problem({"--max-concurrency", "0"}).find("--max-concurrency"), std::string::npos);
  EXPECT_NE(problem({"--max-concurrency", "1,x,4"}).find("'x' is not an integer"), std::string::npos);
  EXPECT_NE(problem({"--max-concurrency", "1,,4"}).find("--max-concurrency"), std::string::npos);
  EXPECT_NE(problem({"--warmup-requests", "-1"}).find("--warmup-requests"), std::string::npos);
  EXPECT_NE(problem({"--slo-ttft", "0"}).find("--slo-ttft"), std::string::npos);
  EXPECT_NE(problem({"--num-gpus", "0"}).find("--num-gpus"), std::string::npos);
  EXPECT_NE(problem({"--port", "70000"}).find("--port"), std::string::npos);
  EXPECT_NE(problem({"--extra-request-body", "[1]"}).find("--extra-request-body must be a JSON object"),
            std::string::npos);
  EXPECT_NE(problem({"--burstiness", "0", "--request-rate", "2"}).find("--burstiness"), std::string::npos);
}

TEST(BenchOptions, RejectsInvalidCombinations) {
  EXPECT_NE(problem({"--backend", "openai-chat", "--dataset-name", "random-ids"}).find("only the completions API"),
            std::string::npos);
  EXPECT_NE(problem({"--base-url", "http://127.0.0.1:1", "--port", "2"}).find("either --base-url or --host/--port"),
            std::string::npos);
  EXPECT_NE(problem({"--output-details"}).find("--output-details needs --output-file"), std::string::npos);
  EXPECT_NE(problem({"--plot-dir", "x", "--max-concurrency", "4"}).find("--plot-dir is for sweeps"),
            std::string::npos);
  EXPECT_NE(problem({"--burstiness", "2"}).find("finite --request-rate"), std::string::npos);
  EXPECT_NE(problem({"--disable-stream", "--slo-tpot", "10"}).find("--slo-tpot needs streaming"), std::string::npos);
  EXPECT_NE(problem({"--vocab-size", "100"}).find("--vocab-size is for --dataset-name random-ids"), std::string::npos);
  EXPECT_EQ(problem({"--dataset-name", "random-ids", "--vocab-size", "100"}), "");
}

TEST(BenchOptions, UnknownFlagsAreParseErrors) {
  EXPECT_THROW(parse({"--random-input-length", "5"}), CLI::ParseError);
  EXPECT_THROW(parse({"--num-prompts", "many"}), CLI::ParseError);
}

}  // namespace
}  // namespace moeserve::bench
