#include "engine/forward_backend.h"

#include <algorithm>

#if MOESERVE_WITH_CUDA
#include "kernels/cuda/device.h"
#include "model/gpu_model.h"
#endif

namespace moeserve::engine {

#if MOESERVE_WITH_CUDA
namespace {

class CudaBackend : public ForwardBackend {
 public:
  CudaBackend(std::unique_ptr<model::GpuModel> gpu, const model::Numerics& numerics, int64_t slots, int64_t pages,
              bool graphs)
      : numerics_(numerics), graphs_(graphs), gpu_(std::move(gpu)) {
    cache_ = std::make_unique<model::GpuKvCache>(gpu_->kv_layout(), slots, pages);
  }
  std::string name() const override { return "cuda (" + cuda::device_info().name + ")"; }
  const io::ModelConfig& config() const override { return gpu_->config(); }
  bool has_mtp() const override { return false; }
  cache::KvCache& cache() override { return cache_->host(); }
  int64_t kv_bytes() const override { return cache_->bytes(); }
  model::ForwardResult forward(const std::vector<model::ForwardRequest>& requests,
                               const model::Numerics& numerics) override {
    check(numerics.act_fp8 == numerics_.act_fp8 && numerics.kv_fp8 == numerics_.kv_fp8 &&
              numerics.indexer_fp4 == numerics_.indexer_fp4,
          "the CUDA backend was set up with other numerics");
    for (const auto& r : requests) check(!r.keep_hidden, "the CUDA backend does not keep hidden states (no MTP)");
    return gpu_->forward(*cache_, requests, graphs_ ? graph_bound(requests) : 0);
  }
  bool samples_on_device() const override { return true; }
  model::ForwardResult mtp_forward(const std::vector<model::MtpRequest>&, const model::Numerics&) override {
    fail("speculative decoding runs on the CPU backend only");
  }

 private:
  // A decode step's graph bound: the power of two (from 1024) at or above every sequence's reserved pages, so
  // kernels sized by the bound stay near the batch's real lengths and a graph is recaptured only when the
  // longest sequence crosses a power of two. 0 (eager) for a step with prompt chunks.
  int64_t graph_bound(const std::vector<model::ForwardRequest>& requests) const {
    const int64_t page_tokens = cache_->host().layout().page_tokens;
    int64_t longest = 0;
    for (const auto& r : requests) {
      if (r.tokens.size() != 1 || r.all_logits) return 0;
      longest = std::max({longest, r.seq->length + 1, int64_t(r.seq->pages.size()) * page_tokens});
    }
    int64_t bound = 1024;
    while (bound < longest) bound *= 2;
    return bound;
  }

  model::Numerics numerics_;
  bool graphs_;
  std::unique_ptr<model::GpuModel> gpu_;
  std::unique_ptr<model::GpuKvCache> cache_;
};

}  // namespace
#endif

std::unique_ptr<ForwardBackend> make_cuda_backend(const model::Model& model, const model::Numerics& numerics,
                                                  int64_t slots, int64_t pages, bool exact, bool graphs) {
#if MOESERVE_WITH_CUDA
  check(cuda::available(), "--device cuda: {}", cuda::device_info().reason);
  return std::make_unique<CudaBackend>(model::GpuModel::from_model(model, {exact, numerics}), numerics, slots, pages,
                                       graphs);
#else
  (void)model, (void)numerics, (void)slots, (void)pages, (void)exact, (void)graphs;
  fail("--device cuda: this moeserve was built without the CUDA backend (MOESERVE_CUDA=OFF)");
#endif
}

std::unique_ptr<ForwardBackend> make_cuda_dummy_backend(const io::ModelConfig& config, uint64_t seed,
                                                        const model::Numerics& numerics, int64_t slots, int64_t pages,
                                                        bool exact, bool graphs) {
#if MOESERVE_WITH_CUDA
  check(cuda::available(), "--device cuda: {}", cuda::device_info().reason);
  return std::make_unique<CudaBackend>(model::GpuModel::dummy(config, 0, seed, {exact, numerics}), numerics, slots,
                                       pages, graphs);
#else
  (void)config, (void)seed, (void)numerics, (void)slots, (void)pages, (void)exact, (void)graphs;
  fail("--load-format dummy needs the CUDA backend; this moeserve was built without it (MOESERVE_CUDA=OFF)");
#endif
}

}  // namespace moeserve::engine
