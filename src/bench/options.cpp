#include "bench/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "bench/backend.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {
std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}
}  // namespace

void add_bench_options(CLI::App& app, BenchOptions& o) {
  app.add_option("--backend", o.backend,
                 "sglang-oai | sglang-oai-chat | openai | openai-chat | vllm | vllm-chat (OpenAI completions or "
                 "chat, streaming)")
      ->capture_default_str();
  app.add_option("--base-url", o.base_url, "server URL, e.g. http://127.0.0.1:30000 (instead of --host/--port)");
  app.add_option("--host", o.host, "server host (default 127.0.0.1)");
  app.add_option("--port", o.port, "server port (default: 30000 for sglang/openai backends, 8000 for vllm)");
  app.add_option("--model", o.model, "model name sent in requests (default: the first of GET /v1/models)");
  app.add_option("--tokenizer", o.tokenizer,
                 "tokenizer.json or a model directory, for building prompts and retokenizing outputs "
                 "(default: --model when it is a local path)");
  app.add_option("--dataset-name", o.dataset_name, "random (text prompts) | random-ids (token-id prompts)")
      ->capture_default_str();
  app.add_option("--num-prompts,--num-prompt", o.num_prompts, "number of requests")->capture_default_str();
  app.add_option("--random-input-len,--random-input", o.random_input_len, "input tokens per request")
      ->capture_default_str();
  app.add_option("--random-output-len,--random-output", o.random_output_len, "output tokens per request")
      ->capture_default_str();
  app.add_option("--random-range-ratio", o.random_range_ratio,
                 "lengths uniform on [r*L, L] (SGLang's definition); 1.0 = fixed lengths")
      ->capture_default_str();
  app.add_option("--request-rate", o.request_rate,
                 "requests per second, Poisson arrivals (gamma with --burstiness); inf = all at once")
      ->capture_default_str();
  app.add_option("--burstiness", o.burstiness, "gamma shape of inter-arrival times (vLLM); 1 = Poisson")
      ->capture_default_str();
  app.add_option("--max-concurrency", o.max_concurrency,
                 "at most N requests in flight; a comma list (1,2,4,8) runs a sweep with a frontier table and plots");
  app.add_option("--warmup-requests", o.warmup_requests, "warmup requests before timing (first prompt, ≤32 tokens)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--output-file", o.output_file, "append one JSON line per run (SGLang's keys plus the arguments)");
  app.add_flag("--output-details", o.output_details, "add per-request lengths, TTFTs, ITLs, texts, errors to the JSON");
  app.add_flag("--disable-tqdm", o.disable_tqdm, "no progress line");
  app.add_flag("--disable-stream", o.disable_stream, "non-streaming requests (TTFT = latency)");
  app.add_flag("--disable-ignore-eos", o.disable_ignore_eos, "let requests stop at EOS");
  app.add_option("--extra-request-body", o.extra_request_body, "JSON object merged into every request body");
  app.add_option("--slo-ttft", o.slo_ttft_ms, "goodput SLO on TTFT in ms (vLLM's definition)");
  app.add_option("--slo-tpot", o.slo_tpot_ms, "goodput SLO on TPOT in ms (vLLM's definition)");
  app.add_option("--slo-e2e", o.slo_e2e_ms, "goodput SLO on end-to-end latency in ms (vLLM's e2el)");
  app.add_option("--vocab-size", o.vocab_size,
                 "random-ids: draw token ids below this (default: the tokenizer's vocabulary size)");
  app.add_option("--num-gpus", o.num_gpus, "GPUs behind the server, for tokens/s/GPU in sweeps")->capture_default_str();
  app.add_option("--plot-dir", o.plot_dir, "sweeps: directory for frontier.tsv, .dat/.gp files and PNG plots "
                                           "(default bench-sweep)");
}

double parse_request_rate(const std::string& text) {
  const std::string t = trim(text);
  if (t == "inf" || t == "Inf" || t == "INF" || t == "infinity") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  errno = 0;
  const double rate = std::strtod(t.c_str(), &end);
  check(!t.empty() && end == t.c_str() + t.size() && errno == 0,
        "--request-rate must be a number of requests per second or 'inf', got '{}'", text);
  check(rate > 0.0, "--request-rate must be positive, got '{}'", text);
  return rate;
}

std::vector<int> parse_concurrency_list(const std::string& text) {
  std::vector<int> levels;
  if (trim(text).empty()) return levels;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(item.c_str(), &end, 10);
    check(!item.empty() && end == item.c_str() + item.size() && errno == 0,
          "--max-concurrency takes a positive integer or a comma list like 1,2,4,8; '{}' is not an integer", item);
    check(value >= 1 && value <= 1000000, "--max-concurrency values must be in 1..1000000, got {}", value);
    levels.push_back(static_cast<int>(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return levels;
}

ResolvedOptions resolve_options(const BenchOptions& o) {
  ResolvedOptions r;
  const Backend& backend = find_backend(o.backend);
  check(o.dataset_name == "random" || o.dataset_name == "random-ids",
        "--dataset-name '{}' is not supported; choose random (text prompts) or random-ids (token-id prompts)",
        o.dataset_name);
  check(!(o.dataset_name == "random-ids" && backend.api == Api::kChat),
        "--dataset-name random-ids sends token ids, which only the completions API accepts; with --backend {} "
        "use --dataset-name random",
        o.backend);
  check(o.num_prompts >= 1, "--num-prompts must be at least 1, got {}", o.num_prompts);
  check(o.random_input_len >= 1, "--random-input-len must be at least 1, got {}", o.random_input_len);
  check(o.random_output_len >= 1, "--random-output-len must be at least 1, got {}", o.random_output_len);
  check(o.random_range_ratio >= 0.0 && o.random_range_ratio <= 1.0,
        "--random-range-ratio must be in [0, 1] (lengths are uniform on [r*L, L]), got {}", o.random_range_ratio);
  r.request_rate = parse_request_rate(o.request_rate);
  check(o.burstiness > 0.0 && std::isfinite(o.burstiness), "--burstiness must be positive, got {}", o.burstiness);
  check(o.burstiness == 1.0 || std::isfinite(r.request_rate),
        "--burstiness shapes the arrival process and needs a finite --request-rate (all requests arrive at once "
        "with --request-rate inf)");
  r.concurrency_levels = parse_concurrency_list(o.max_concurrency);
  check(o.warmup_requests >= 0, "--warmup-requests must be 0 or more, got {}", o.warmup_requests);
  check(o.vocab_size >= 0, "--vocab-size must be positive, got {}", o.vocab_size);
  check(o.vocab_size == 0 || o.dataset_name == "random-ids",
        "--vocab-size is for --dataset-name random-ids (text prompts come from the tokenizer)");
  check(o.num_gpus >= 1, "--num-gpus must be at least 1, got {}", o.num_gpus);
  check(!(o.output_details && o.output_file.empty()), "--output-details needs --output-file");
  check(o.plot_dir.empty() || r.sweep(),
        "--plot-dir is for sweeps: give --max-concurrency a comma list such as 1,2,4,8");
  for (auto [flag, value] : {std::pair{"--slo-ttft", o.slo_ttft_ms}, std::pair{"--slo-tpot", o.slo_tpot_ms},
                             std::pair{"--slo-e2e", o.slo_e2e_ms}})
    check(!value || (*value > 0.0 && std::isfinite(*value)), "{} must be a positive number of ms, got {}", flag,
          value.value_or(0.0));
  r.slo = SloConfig{o.slo_ttft_ms, o.slo_tpot_ms, o.slo_e2e_ms};
  check(!(o.disable_stream && o.slo_tpot_ms),
        "--slo-tpot needs streaming: with --disable-stream every request has TPOT 0 (TTFT = latency)");
  if (!o.base_url.empty()) {
    check(!o.host && !o.port, "give either --base-url or --host/--port, not both");
  }
  r.host = o.host.value_or("127.0.0.1");
  r.port = o.port.value_or(backend.default_port);
  check(r.port > 0 && r.port < 65536, "--port must be in 1..65535, got {}", r.port);
  if (o.extra_request_body.empty()) {
    r.extra_body_json = "{}";
  } else {
    auto body = nlohmann::json::parse(o.extra_request_body, nullptr, false);
    check(!body.is_discarded() && body.is_object(),
          "--extra-request-body must be a JSON object such as '{{\"top_k\": 1}}', got '{}'", o.extra_request_body);
    r.extra_body_json = body.dump();
  }
  return r;
}

}  // namespace moeserve::bench
