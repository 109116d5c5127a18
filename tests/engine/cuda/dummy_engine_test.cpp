// The engine over dummy weights (`moeserve serve --load-format dummy`): concurrent greedy requests, batched and
// graph-replayed by the engine, get the tokens `generate --load-format dummy` makes alone on the same weights.
#include <gtest/gtest.h>

#include <future>
#include <memory>

#include "engine/gpu_generate.h"
#include "engine/startup.h"
#include "io/model_config.h"
#include "kernels/cuda/device.h"
#include "model/fixture.h"

namespace moeserve {
namespace {

TEST(DummyEngine, ConcurrentGreedyRequestsGetWhatGenerateMakesAlone) {
  if (!cuda::available()) GTEST_SKIP() << cuda::device_info().reason;
  const io::ModelConfig config = io::load_model_config(testing::model_fixture("tiny_hf") + "/config.json");
  engine::StartupOptions so;
  so.device = "cuda";
  so.max_running_requests = 4;
  so.max_model_len = 256;
  const engine::EnginePlan plan = engine::plan_engine(config, so);
  auto eng = engine::start_dummy_engine(config, 1, plan, nullptr);  // seed 1: generate's weights at its seed 0
  const int n = 4, max_tokens = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 5 + 7 * r; ++i) p.push_back(int32_t((3 + 31 * r + 17 * i) % config.vocab_size));
    prompts.push_back(p);
  }
  struct Got {
    std::vector<int32_t> tokens;
    std::promise<void> done;
  };
  std::vector<std::shared_ptr<Got>> got;
  for (const auto& p : prompts) {
    auto g = std::make_shared<Got>();
    engine::GenerationParams params;
    params.sampling.temperature = 0.0f;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    eng->submit(p, params, [g](const engine::RequestEvent& e) {
      g->tokens.insert(g->tokens.end(), e.token_ids.begin(), e.token_ids.end());
      if (e.finish != engine::FinishReason::None) g->done.set_value();
    });
    got.push_back(g);
  }
  for (auto& g : got) g->done.get_future().wait();
  eng->wait_idle();
  EXPECT_EQ(eng->status().pages_free, eng->status().pages_total);
  for (int r = 0; r < n; ++r) {
    engine::GenerateOptions o;
    o.max_new_tokens = max_tokens;
    const auto alone = engine::generate_cuda_dummy(config, 0, prompts[size_t(r)], o);
    EXPECT_EQ(got[size_t(r)]->tokens, alone.output_ids) << "request " << r;
  }
}

}  // namespace
}  // namespace moeserve
