// moeserve serve [--model DIR] [--host H] [--port P] [--profile NAME] ...: the OpenAI-compatible server.
// With no --model it serves the built-in demo model. Memory is planned by the capacity planner (the same
// numbers `moeserve plan` prints) and logged at startup.
#include <csignal>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/log.h"
#include "engine/startup.h"
#include "io/model_config.h"
#include "model/builtin.h"
#include "planner/report.h"
#include "server/http_server.h"
#include "server/text_decoder.h"

namespace moeserve::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", profile, served_model_name, numerics = "reference", device = "cpu";
  std::string cuda_kernels;  // "" = exact
  std::string load_format = "auto", tokenizer;
  int64_t num_layers = 0;
  double mem_fraction = 0.0;  // 0: the profile's
  bool disable_cuda_graph = false;
  int port = 30000;
  double memory_gib = 4.0;
  int64_t max_running_requests = 0, max_batch_tokens = 0, max_model_len = 0, default_max_tokens = 256;
  int threads = 128;
  std::string speculative_algorithm;
  int64_t speculative_steps = 3;
};

server::HttpServer* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}

int run_serve(const ServeArgs& a) {
  namespace fs = std::filesystem;
  check(a.device == "cuda" || a.cuda_kernels.empty(),
        "--cuda-kernels applies to --device cuda only (the CPU engine is the reference)");
  check(a.device == "cuda" || !a.disable_cuda_graph, "--disable-cuda-graph applies to --device cuda only");
  const bool dummy = a.load_format == "dummy";
  check(!dummy || a.device == "cuda", "--load-format dummy runs on the GPU only; add --device cuda");
  check(dummy || a.num_layers == 0, "--num-layers is for --load-format dummy");
  check(a.num_layers >= 0, "--num-layers must be >= 0 (0: all), got {}", a.num_layers);
  const std::string dir = a.model.empty() ? model::builtin_model_dir() : a.model;
  // --load-format dummy: the config's shapes (its first --num-layers layers) with random weights made on the GPU.
  std::shared_ptr<model::Model> model;
  io::ModelConfig config;
  if (dummy) {
    config = io::load_model_config((fs::path(dir) / "config.json").string());
    check(a.num_layers <= config.num_layers, "--num-layers {}: the model has {} layers", a.num_layers,
          config.num_layers);
    io::keep_first_layers(config, a.num_layers);
  } else {
    model = model::Model::load(dir);
  }
  std::shared_ptr<const server::Tokenizer> tokenizer;
  if (!a.tokenizer.empty())
    tokenizer = std::make_shared<server::Tokenizer>(server::Tokenizer::load(a.tokenizer));
  else if (fs::exists(fs::path(dir) / "tokenizer.json"))
    tokenizer = std::make_shared<server::Tokenizer>(server::Tokenizer::load(dir));
  else
    spdlog::warn("{} has no tokenizer.json (and no --tokenizer): requests must send token ids", dir);

  engine::StartupOptions startup;
  startup.device = a.device;
  startup.profile = a.profile;
  startup.memory_bytes = a.device == "cpu" ? int64_t(a.memory_gib * double(1ll << 30)) : 0;
  startup.max_running_requests = a.max_running_requests;
  startup.max_batch_tokens = a.max_batch_tokens;
  startup.max_model_len = a.max_model_len;
  startup.numerics = model::Numerics::parse(a.numerics);
  startup.cuda_exact = a.cuda_kernels != "fast";
  startup.cuda_graphs = !a.disable_cuda_graph;
  startup.dummy_weights = dummy;
  if (a.mem_fraction != 0.0) startup.mem_fraction = a.mem_fraction;
  if (!a.speculative_algorithm.empty()) {
    check(a.speculative_algorithm == "mtp", "--speculative-algorithm '{}' (expected 'mtp')", a.speculative_algorithm);
    startup.speculative_steps = a.speculative_steps;
  }
  engine::EnginePlan plan = dummy ? engine::plan_engine(config, startup) : engine::plan_engine(*model, startup);
  spdlog::info("memory plan ({} on {}):\n{}", plan.plan.profile.name, plan.plan.device.name,
               planner::format_plan_text(plan.plan));

  std::shared_ptr<engine::TextDecoderFactory> decoder;
  if (tokenizer) decoder = std::make_shared<server::TokenizerTextDecoderFactory>(tokenizer);
  // Dummy weights from seed 1: the weights `moeserve generate --load-format dummy` makes at its default seed.
  auto eng = dummy ? engine::start_dummy_engine(config, 1, plan, decoder)
                   : engine::start_engine(model, plan, a.device, decoder);

  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.threads = a.threads;
  so.model_name = a.served_model_name.empty() ? fs::path(dir).filename().string() : a.served_model_name;
  if (so.model_name.empty()) so.model_name = "model";
  so.defaults.chat_max_tokens = a.default_max_tokens;
  server::HttpServer http(eng, tokenizer, so);
  http.bind();
  g_server = &http;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  spdlog::info("serving '{}' on http://{}:{} with the {} backend ({} slots, {} KV pages = {} tokens, max context {})",
               so.model_name, a.host, http.port(), eng->backend_name(), plan.options.limits.max_running_requests,
               plan.options.kv_pages, plan.options.kv_pages * 256, eng->max_model_len());
  std::cout << "moeserve: listening on http://" << a.host << ":" << http.port() << std::endl;
  http.serve();
  g_server = nullptr;
  spdlog::info("stopped");
  return 0;
}

CommandRegistration registration{{"serve", "OpenAI-compatible server (default: the built-in demo model)",
                                  [](CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("--model", a->model, "model directory (default: the built-in demo model)");
  app.add_option("--host", a->host, "address to listen on");
  app.add_option("--port", a->port, "port (0 = any free port, printed at startup)")->check(CLI::Range(0, 65535));
  app.add_option("--profile", a->profile, "serving profile (profiles/<name>.json; default cpu, or h200-reference "
                                          "with --device cuda)");
  app.add_option("--device", a->device, "cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--cpu-memory-gib", a->memory_gib, "host memory the CPU engine may plan with")->check(CLI::PositiveNumber);
  app.add_option("--max-running-requests", a->max_running_requests, "request slots (default: the profile's)");
  app.add_option("--max-batch-tokens", a->max_batch_tokens, "tokens per engine step (chunked prefill budget)");
  app.add_option("--max-model-len", a->max_model_len, "longest prompt + max_tokens accepted");
  app.add_option("--default-max-tokens", a->default_max_tokens, "max_tokens of a chat request that gives none");
  app.add_option("--served-model-name", a->served_model_name, "model name in the API (default: the directory name)");
  app.add_option("--numerics", a->numerics, "reference|checkpoint")->check(CLI::IsMember({"reference", "checkpoint"}));
  app.add_option("--cuda-kernels", a->cuda_kernels,
                 "with --device cuda: exact (fp32 activations into every GEMM, the reference engine's logits) or fast (cuBLASLt past 8 rows; MXFP4 experts stay MXFP4 and run the W4A8 GEMM with --numerics checkpoint)")
      ->check(CLI::IsMember({"exact", "fast"}));
  app.add_flag("--disable-cuda-graph", a->disable_cuda_graph,
               "with --device cuda: run decode steps eagerly (by default each batch size replays a captured graph)");
  app.add_option("--load-format", a->load_format,
                 "auto (the checkpoint in --model) | dummy (random weights of its config's shapes, made on the GPU: "
                 "performance work without a checkpoint; with --device cuda)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  app.add_option("--num-layers", a->num_layers, "with --load-format dummy: the first N layers (0: all)");
  app.add_option("--mem-fraction-static", a->mem_fraction,
                 "fraction of the device's memory the engine plans with (default: the profile's mem_fraction)");
  app.add_option("--tokenizer", a->tokenizer,
                 "a tokenizer.json, or a directory holding one (default: the model directory's)");
  app.add_option("--http-threads", a->threads, "HTTP worker threads (each streaming response holds one)");
  app.add_option("--speculative-algorithm", a->speculative_algorithm, "speculative decoding: mtp (off when absent)");
  app.add_option("--speculative-num-steps", a->speculative_steps, "MTP draft steps per verify (with mtp)")
      ->check(CLI::Range(1, 16));
  return [a] { return run_serve(*a); };
}}};

}  // namespace
}  // namespace moeserve::cli
