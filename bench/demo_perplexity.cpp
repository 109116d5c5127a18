// Held-out perplexity of the demo model on the CPU reference engine, against the training run's figure
// (HF transformers fp32 over the same 512-token windows: tests/fixtures/models/demo_heldout.safetensors).
// Usage: demo_perplexity [max_windows]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "engine/generate.h"
#include "io/safetensors.h"
#include "model/model.h"

using namespace moeserve;

int main(int argc, char** argv) {
  const std::string root = MOESERVE_SOURCE_DIR;
  auto model = model::Model::load(root + "/models/demo");
  auto heldout = io::Checkpoint::open_files({root + "/tests/fixtures/models/demo_heldout.safetensors"});
  const Tensor& ids = heldout.get("heldout_ids").tensor;
  const Tensor& oracle_nll = heldout.get("window_nll").tensor;
  const Tensor& window_tokens = heldout.get("window_tokens").tensor;
  const int64_t windows = std::min<int64_t>(argc > 1 ? std::atoll(argv[1]) : 1 << 30, oracle_nll.numel());
  const int64_t vocab = model->config().vocab_size;
  double nll = 0, oracle = 0, worst_rel = 0;
  int64_t scored = 0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t w = 0; w < windows; ++w) {
    const int64_t begin = w * 512, end = std::min<int64_t>(begin + 512, ids.numel());
    std::vector<int32_t> window;
    for (int64_t i = begin; i < end; ++i) window.push_back(int32_t(ids.data<int64_t>()[i]));
    Tensor logits = engine::all_logits(*model, window, 0, model::Numerics::reference());
    double sum = 0;
    for (int64_t t = 0; t + 1 < int64_t(window.size()); ++t) {
      const float* row = logits.f32() + t * vocab;
      double mx = -INFINITY, z = 0;
      for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, double(row[v]));
      for (int64_t v = 0; v < vocab; ++v) z += std::exp(double(row[v]) - mx);
      sum -= double(row[window[size_t(t + 1)]]) - mx - std::log(z);
    }
    nll += sum;
    oracle += oracle_nll.data<double>()[w];
    scored += window_tokens.data<int64_t>()[w];
    worst_rel = std::max(worst_rel, std::fabs(sum - oracle_nll.data<double>()[w]) / oracle_nll.data<double>()[w]);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double ppl = std::exp(nll / double(scored)), ppl_oracle = std::exp(oracle / double(scored));
  std::printf("windows %lld, scored tokens %lld, %.0f s\n", (long long)windows, (long long)scored, seconds);
  std::printf("perplexity: engine %.4f, HF transformers %.4f, relative difference %.2e (worst window NLL %.2e)\n",
              ppl, ppl_oracle, std::fabs(ppl - ppl_oracle) / ppl_oracle, worst_rel);
  return 0;
}
