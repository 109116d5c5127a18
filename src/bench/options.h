#pragma once
// `moeserve bench` flags: the names, defaults and meaning of sglang.bench_serving's (so a command line
// written for it works here), plus vLLM's burstiness and goodput SLOs, concurrency sweeps and plots.
// Differences from SGLang, on purpose: the default dataset is `random` (no ShareGPT file offline),
// --host defaults to 127.0.0.1, and a JSON line is written only when --output-file is given.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/metrics.h"

namespace moeserve::bench {

struct BenchOptions {
  std::string backend = "sglang-oai";
  std::string base_url;
  std::optional<std::string> host;  // default 127.0.0.1
  std::optional<int> port;          // default: the backend's (SGLang: 30000, vLLM: 8000)
  std::string model;                // default: GET /v1/models → data[0].id
  std::string tokenizer;            // tokenizer.json or a model directory; default: --model if it is a path
  std::string dataset_name = "random";
  int num_prompts = 1000;
  int random_input_len = 1024;
  int random_output_len = 1024;
  double random_range_ratio = 0.0;  // SGLang: lengths uniform on [max(⌊r·L⌋,1), L]; 1.0 = fixed
  std::string request_rate = "inf";
  double burstiness = 1.0;
  std::string max_concurrency;  // "" (not set), "8", or a sweep "1,2,4,8"
  int warmup_requests = 1;
  uint64_t seed = 1;
  std::string output_file;
  bool output_details = false;
  bool disable_tqdm = false;
  bool disable_stream = false;
  bool disable_ignore_eos = false;
  std::string extra_request_body;  // a JSON object merged into every request body
  std::optional<double> slo_ttft_ms, slo_tpot_ms, slo_e2e_ms;
  int vocab_size = 0;  // random-ids without a tokenizer: ids are drawn below this (0 = the tokenizer's)
  int num_gpus = 1;
  std::string plot_dir;  // sweeps: where the frontier table, .dat/.gp files and PNGs go
};

// Registers every flag on `app`, bound to `options`.
void add_bench_options(CLI::App& app, BenchOptions& options);

// What the options mean once checked: parsed numbers, resolved defaults.
struct ResolvedOptions {
  double request_rate = 0.0;                 // +inf for "inf"
  std::vector<int> concurrency_levels;       // empty = not set (one run without a limit)
  int port = 0;
  std::string host;
  SloConfig slo;
  std::string extra_body_json;               // normalised JSON object text ("{}" when none)
  bool sweep() const { return concurrency_levels.size() > 1; }
};

// Checks every flag and combination; throws moeserve::Error with a message naming the flag.
ResolvedOptions resolve_options(const BenchOptions& options);

// "inf" | a positive number.
double parse_request_rate(const std::string& text);
// "" | "N" | "N1,N2,..." with every N ≥ 1.
std::vector<int> parse_concurrency_list(const std::string& text);

}  // namespace moeserve::bench
