// moeserve generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) --max-new-tokens N [--temperature T]
//                   [--device cpu|cuda] [--dump-logits FILE] [--numerics reference|checkpoint] ...
// Prints one JSON object: output_ids, text (when the model has a tokenizer), finish_reason, prompt_tokens.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/parse.h"
#include <future>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/gpu_generate.h"
#include "engine/startup.h"
#include "io/safetensors.h"
#include "model/builtin.h"
#include "model/model.h"
#include "server/tokenizer.h"

namespace moeserve::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_ids, device = "cpu", dump_logits, numerics = "reference", load_format = "auto";
  std::string cuda_kernels;  // "" = exact
  int64_t max_new_tokens = 16, top_k = 0, prefill_chunk = 0, num_layers = 0;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false, cuda_graphs = false;
  std::string speculative_algorithm;
  int64_t speculative_steps = 3;
  std::string routing_histogram;  // --routing-histogram FILE
};

// Speculative decoding runs in the batched engine (one request here).
engine::GenerateResult generate_speculative(std::shared_ptr<model::Model> model, const std::vector<int32_t>& prompt,
                                            const engine::GenerateOptions& o, int64_t steps, nlohmann::json* stats) {
  engine::StartupOptions startup;
  startup.memory_bytes = 1ll << 30;
  startup.max_running_requests = 1;
  startup.numerics = o.numerics;
  startup.speculative_steps = steps;
  engine::EnginePlan plan = engine::plan_engine(*model, startup);
  engine::Engine eng(model, nullptr, plan.options);
  engine::GenerationParams params;
  params.sampling = o.sampling;
  params.seed = o.seed;
  params.max_tokens = o.max_new_tokens;
  params.ignore_eos = o.stop_token_ids.empty();
  std::promise<engine::GenerateResult> done;
  auto result = std::make_shared<engine::GenerateResult>();
  std::string error;
  eng.submit(prompt, params, [&, result](const engine::RequestEvent& e) {
    result->output_ids.insert(result->output_ids.end(), e.token_ids.begin(), e.token_ids.end());
    (*stats)["spec_verify_steps"] = e.spec_verify_steps;
    (*stats)["spec_accepted_tokens"] = e.spec_accepted_tokens;
    if (e.finish == engine::FinishReason::None) return;
    if (e.finish == engine::FinishReason::Error) error = e.error;
    result->finish_reason = engine::finish_reason_name(e.finish);
    done.set_value(*result);
  });
  engine::GenerateResult r = done.get_future().get();
  check(error.empty(), "{}", error);
  uint64_t steps_done = (*stats)["spec_verify_steps"];
  if (steps_done)
    (*stats)["spec_accept_length"] = double(r.output_ids.size()) / double(steps_done);
  return r;
}

int run_generate(const GenerateArgs& a) {
  namespace fs = std::filesystem;
  check(a.prompt.empty() != a.prompt_ids.empty(), "pass exactly one of --prompt TEXT or --prompt-ids 1,2,3");
  check(a.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got {}", a.max_new_tokens);
  const std::string dir = a.model.empty() ? model::builtin_model_dir() : a.model;
  check(a.device == "cuda" || (a.cuda_kernels.empty() && !a.cuda_graphs),
        "--cuda-kernels and --cuda-graph apply to --device cuda only (the CPU engine is the reference)");
  check(a.routing_histogram.empty() || a.device == "cpu",
        "--routing-histogram records in the reference engine: use it with --device cpu");
  const engine::CudaRunOptions cuda_run{a.cuda_kernels != "fast", a.cuda_graphs};
  if (a.load_format == "dummy") {  // random weights of the config's shapes, created on the GPU (performance work)
    check(a.device == "cuda", "--load-format dummy runs on the GPU only; add --device cuda");
    check(!a.prompt_ids.empty(), "--load-format dummy has no tokenizer: pass --prompt-ids");
    engine::GenerateOptions o;
    o.max_new_tokens = a.max_new_tokens;
    o.sampling = {a.temperature, a.top_p, a.top_k};
    o.seed = a.seed;
    o.numerics = model::Numerics::parse(a.numerics);
    io::ModelConfig config = io::load_model_config((fs::path(dir) / "config.json").string());
    engine::GenerateResult r =
        engine::generate_cuda_dummy(config, a.num_layers, parse_id_list(a.prompt_ids, "--prompt-ids"), o, cuda_run);
    nlohmann::json out;
    out["output_ids"] = r.output_ids;
    out["finish_reason"] = r.finish_reason;
    std::cout << out.dump() << "\n";
    return 0;
  }
  check(a.num_layers == 0, "--num-layers is for --load-format dummy");
  auto model = model::Model::load(dir);
  model::RoutingHistogram routing;
  if (!a.routing_histogram.empty()) {
    routing.model = dir;
    model->record_routing(&routing);
  }
  std::optional<server::Tokenizer> tokenizer;
  if (fs::exists(fs::path(dir) / "tokenizer.json")) tokenizer = server::Tokenizer::load(dir);

  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
  } else {
    check(tokenizer.has_value(), "--prompt needs a tokenizer, but {} has no tokenizer.json; use --prompt-ids", dir);
    prompt = tokenizer->encode(a.prompt, /*add_special_tokens=*/true);
  }
  const int64_t vocab = model->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i)
    check(prompt[i] >= 0 && prompt[i] < vocab, "--prompt-ids: id {} at index {} is outside the vocabulary [0, {})",
          prompt[i], i, vocab);

  engine::GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = {a.temperature, a.top_p, a.top_k};
  o.seed = a.seed;
  o.prefill_chunk = a.prefill_chunk;
  o.keep_logits = !a.dump_logits.empty();
  o.numerics = model::Numerics::parse(a.numerics);
  if (!a.ignore_eos) o.stop_token_ids = model->config().eos_token_ids;
  nlohmann::json spec_stats;
  engine::GenerateResult r;
  if (a.speculative_algorithm.empty()) {
    r = a.device == "cuda" ? engine::generate_cuda(*model, prompt, o, cuda_run) : engine::generate(*model, prompt, o);
  } else {
    check(a.device == "cpu", "--speculative-algorithm runs on --device cpu only for now");
    check(a.speculative_algorithm == "mtp", "--speculative-algorithm '{}' (expected 'mtp')", a.speculative_algorithm);
    check(a.dump_logits.empty(), "--dump-logits is not available with speculative decoding");
    r = generate_speculative(model, prompt, o, a.speculative_steps, &spec_stats);
  }

  if (!a.dump_logits.empty()) io::save_safetensors(a.dump_logits, {{"logits", r.logits}});
  if (!a.routing_histogram.empty()) {
    model->record_routing(nullptr);
    routing.save(a.routing_histogram);
  }
  nlohmann::json out;
  out["output_ids"] = r.output_ids;
  out["prompt_tokens"] = prompt.size();
  out["finish_reason"] = r.finish_reason;
  if (tokenizer) out["text"] = tokenizer->decode(r.output_ids, /*skip_special_tokens=*/true);
  if (!spec_stats.is_null()) out["speculative"] = spec_stats;
  std::cout << out.dump() << "\n";
  return 0;
}

CommandRegistration registration{{"generate", "generate tokens with the reference engine", [](CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("--model", a->model, "model directory (default: the built-in demo model)");
  app.add_option("--prompt", a->prompt, "prompt text (tokenized with the model's tokenizer, BOS added)");
  app.add_option("--prompt-ids", a->prompt_ids, "prompt token ids, comma separated");
  app.add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate")->required();
  app.add_option("--temperature", a->temperature, "0 = greedy");
  app.add_option("--top-p", a->top_p, "nucleus sampling mass");
  app.add_option("--top-k", a->top_k, "top-k sampling (0 = off)");
  app.add_option("--seed", a->seed, "sampling seed");
  app.add_option("--device", a->device, "cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dump-logits", a->dump_logits, "write logits [P+N-1, vocab] (F32 'logits') to this safetensors file");
  app.add_option("--numerics", a->numerics, "reference|checkpoint")->check(CLI::IsMember({"reference", "checkpoint"}));
  app.add_option("--prefill-chunk", a->prefill_chunk, "prefill in chunks of this many tokens (0 = all at once)");
  app.add_flag("--ignore-eos", a->ignore_eos, "do not stop at the end-of-sequence token");
  app.add_option("--load-format", a->load_format, "auto|dummy (random weights of the config's shapes on the GPU)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  app.add_option("--num-layers", a->num_layers, "with --load-format dummy: run the first N layers");
  app.add_flag("--cuda-graph", a->cuda_graphs, "with --device cuda: replay a captured CUDA graph for decode steps");
  app.add_option("--cuda-kernels", a->cuda_kernels,
                 "with --device cuda: exact (fp32 activations into every GEMM, the reference engine's logits) or fast (cuBLASLt past 8 rows; MXFP4 experts stay MXFP4 and run the W4A8 GEMM with --numerics checkpoint)")
      ->check(CLI::IsMember({"exact", "fast"}));
  app.add_option("--speculative-algorithm", a->speculative_algorithm, "speculative decoding: mtp (off when absent)");
  app.add_option("--speculative-num-steps", a->speculative_steps, "MTP draft steps per verify")->check(CLI::Range(1, 16));
  app.add_option("--routing-histogram", a->routing_histogram,
                 "with --device cpu: write the MoE layers' expert counts of this run to this JSON file (for "
                 "bench_gpu_moe_w4a8 --routing)");
  return [a] { return run_generate(*a); };
}}};

}  // namespace
}  // namespace moeserve::cli
