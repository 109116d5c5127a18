#include "bench/bench.h"

#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <sys/resource.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/backend.h"
#include "bench/dataset.h"
#include "bench/endpoint.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/sweep.h"
#include "bench/tokenizer_codec.h"
#include "core/error.h"
#include "model/builtin.h"

namespace moeserve::bench {
namespace {
double g_warmup_pause_s = 1.0;

// Every request in flight holds a socket: lift the soft file limit to the hard one, as SGLang does.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// --tokenizer, else --model when it is a local path, else the built-in demo model's directory when
// the server serves it under its directory name (what `moeserve serve` without --model does).
std::string tokenizer_path(const BenchOptions& o, const std::string& served_model, std::ostream& out) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  if (!o.model.empty() && std::filesystem::exists(o.model)) return o.model;
  try {
    const std::string demo = model::builtin_model_dir();
    if (served_model == std::filesystem::path(demo).filename().string()) {
      out << "Using the tokenizer of the built-in demo model (" << demo << ") for '" << served_model << "'\n";
      return demo;
    }
  } catch (const Error&) {
    // No built-in model installed: the caller reports the missing tokenizer if the dataset needs one.
  }
  return {};
}

std::vector<Prompt> build_dataset(const BenchOptions& o, const TokenCodec* codec, std::ostream& out) {
  const DatasetSpec spec{o.num_prompts, o.random_input_len, o.random_output_len, o.random_range_ratio};
  std::mt19937_64 rng(o.seed);
  std::vector<Prompt> prompts;
  if (o.dataset_name == "random-ids") {
    check(codec != nullptr || o.vocab_size > 0,
          "--dataset-name random-ids needs the vocabulary size: pass --tokenizer (a tokenizer.json or a model "
          "directory), --model as a local model directory, or --vocab-size");
    prompts = random_ids_dataset(spec, o.vocab_size > 0 ? static_cast<size_t>(o.vocab_size) : codec->vocab_size(), rng);
  } else {
    check(codec != nullptr,
          "--dataset-name random builds text prompts with the model's tokenizer: pass --tokenizer (a "
          "tokenizer.json or a model directory), or --model as a local model directory");
    TextDatasetStats stats;
    prompts = random_text_dataset(spec, *codec, rng, &stats);
    if (stats.inexact > 0)
      out << fmt::format("Note: {} of {} prompts do not re-encode to their target length; their true "
                         "lengths are used.\n",
                         stats.inexact, prompts.size());
  }
  long long in = 0, gen = 0;
  for (const auto& p : prompts) {
    in += p.prompt_len;
    gen += p.output_len;
  }
  out << "#Input tokens: " << in << "\n#Output tokens: " << gen << "\n";
  return prompts;
}

nlohmann::ordered_json run_arguments(const BenchOptions& o, const Endpoint& endpoint, const std::string& model) {
  nlohmann::ordered_json a;
  a["model"] = model;
  a["tokenizer"] = o.tokenizer;
  a["base_url"] = endpoint.base_url();
  a["num_prompts"] = o.num_prompts;
  a["seed"] = o.seed;
  a["burstiness"] = o.burstiness;
  a["warmup_requests"] = o.warmup_requests;
  a["disable_stream"] = o.disable_stream;
  a["disable_ignore_eos"] = o.disable_ignore_eos;
  a["extra_request_body"] = o.extra_request_body.empty() ? nlohmann::ordered_json(nullptr)
                                                         : nlohmann::ordered_json::parse(o.extra_request_body);
  a["num_gpus"] = o.num_gpus;
  a["random_range_ratio_semantics"] = "uniform [max(floor(r*L),1), L] (sglang)";
  a["tool"] = "moeserve bench";
  return a;
}
}  // namespace

void set_warmup_pause_for_testing(double seconds) { g_warmup_pause_s = seconds; }

int run_bench(const BenchOptions& o, std::ostream& out, const std::atomic<bool>* interrupt) {
  const ResolvedOptions r = resolve_options(o);
  const Backend& backend = find_backend(o.backend);
  const Endpoint endpoint = make_endpoint(o.base_url, r.host, r.port);
  raise_open_file_limit();
  if (!o.output_file.empty()) {  // fail before the run, not after it
    std::ofstream probe(o.output_file, std::ios::app);
    check(probe.good(), "--output-file: cannot open '{}' for appending (does its directory exist?)", o.output_file);
  }

  std::string model = o.model;
  if (model.empty()) {
    auto found = discover_model(endpoint);
    check(found.has_value(), "no model given and GET {}/v1/models listed none: pass --model", endpoint.base_url());
    model = *found;
  } else {
    check_reachable(endpoint);
  }

  std::unique_ptr<TokenCodec> codec;
  if (const std::string path = tokenizer_path(o, model, out); !path.empty()) codec = load_token_codec(path);
  const std::vector<Prompt> prompts = build_dataset(o, codec.get(), out);
  out.flush();

  RunConfig config;
  config.endpoint = endpoint;
  config.settings.api = backend.api;
  config.settings.model = model;
  config.settings.stream = !o.disable_stream;
  config.settings.ignore_eos = !o.disable_ignore_eos;
  config.settings.extra_body = nlohmann::json::parse(r.extra_body_json);
  config.request_rate = r.request_rate;
  config.burstiness = o.burstiness;
  config.warmup_requests = o.warmup_requests;
  config.warmup_pause_s = g_warmup_pause_s;
  config.seed = o.seed;
  config.progress = !o.disable_tqdm;
  config.interrupt = interrupt;

  std::vector<std::optional<int>> levels;
  for (int level : r.concurrency_levels) levels.emplace_back(level);
  if (levels.empty()) levels.emplace_back(std::nullopt);

  std::vector<SweepPoint> sweep;
  bool interrupted = false, any_completed = false;
  for (const auto& level : levels) {
    config.max_concurrency = level;
    RunResult run;
    try {
      run = run_benchmark(config, prompts);
    } catch (const Error&) {
      if (interrupt && interrupt->load()) {
        out << "Interrupted before any request was timed; nothing to report.\n";
        return 130;
      }
      throw;
    }
    std::vector<long long> retokenized;
    if (codec) {
      retokenized.reserve(run.outputs.size());
      for (const auto& o2 : run.outputs)
        retokenized.push_back(o2.success ? static_cast<long long>(codec->encode(o2.generated_text).size()) : 0);
    }
    BenchmarkMetrics metrics = compute_metrics(run.outputs, run.duration_s, r.slo, codec ? &retokenized : nullptr);
    if (backend.reports_accept_len && !run.interrupted) metrics.accept_length = fetch_accept_length(endpoint);

    RunDescription desc{o.backend,         o.dataset_name, r.request_rate,   level,           o.random_input_len,
                        o.random_output_len, o.random_range_ratio, run.duration_s, run.interrupted, run.not_dispatched};
    out << format_report(metrics, desc);
    if (metrics.failed > 0) {
      for (const auto& req : run.outputs)
        if (!req.success && !req.cancelled) {
          out << fmt::format("First failure ({} failed): {}\n", metrics.failed, req.error);
          break;
        }
    }
    if (metrics.completed == 0 && !run.interrupted)
      out << "All requests failed. This is likely due to a misconfiguration of the benchmark arguments or a server "
             "fault.\n";
    out.flush();
    if (!o.output_file.empty()) {
      auto line = result_json(metrics, desc, run_arguments(o, endpoint, model), r.slo);
      if (o.output_details) add_details(line, run.outputs);
      append_json_line(o.output_file, line);
      out << "Results appended to " << o.output_file << "\n";
    }
    any_completed = any_completed || metrics.completed > 0;
    if (level) sweep.push_back({*level, metrics});
    if (run.interrupted) {
      interrupted = true;
      break;
    }
  }

  if (r.sweep() && !sweep.empty()) {
    out << "\n" << format_frontier_table(sweep, o.num_gpus);
    const std::string dir = o.plot_dir.empty() ? std::string("bench-sweep") : o.plot_dir;
    const std::string title = fmt::format("{} {} in={} out={} ratio={}", o.backend, model, o.random_input_len,
                                          o.random_output_len, o.random_range_ratio);
    const PlotResult plots = write_sweep_files(sweep, o.num_gpus, dir, title);
    out << "Sweep files in " << dir << "/: frontier.tsv, sweep.dat, *.gp"
        << (plots.drew_png ? ", ttft_vs_concurrency.png, tpot_vs_concurrency.png, frontier.png" : "") << "\n";
    if (!plots.drew_png) out << "No PNG plots: " << plots.problem << "\n";
  }
  out.flush();
  if (interrupted) return 130;
  return any_completed ? 0 : 1;
}

}  // namespace moeserve::bench
