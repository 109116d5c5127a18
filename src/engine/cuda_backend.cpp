#include "engine/forward_backend.h"

#if MOESERVE_WITH_CUDA
#include "kernels/cuda/device.h"
#include "model/gpu_model.h"
#endif

namespace moeserve::engine {

#if MOESERVE_WITH_CUDA
namespace {

class CudaBackend : public ForwardBackend {
 public:
  CudaBackend(const model::Model& model, const model::Numerics& numerics, int64_t slots, int64_t pages, bool exact)
      : numerics_(numerics) {
    model::GpuOptions options;
    options.exact = exact;
    options.numerics = numerics;
    gpu_ = model::GpuModel::from_model(model, options);
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
    return gpu_->forward(*cache_, requests);
  }
  model::ForwardResult mtp_forward(const std::vector<model::MtpRequest>&, const model::Numerics&) override {
    fail("speculative decoding runs on the CPU backend only");
  }

 private:
  model::Numerics numerics_;
  std::unique_ptr<model::GpuModel> gpu_;
  std::unique_ptr<model::GpuKvCache> cache_;
};

}  // namespace
#endif

std::unique_ptr<ForwardBackend> make_cuda_backend(const model::Model& model, const model::Numerics& numerics,
                                                  int64_t slots, int64_t pages, bool exact) {
#if MOESERVE_WITH_CUDA
  check(cuda::available(), "--device cuda: {}", cuda::device_info().reason);
  return std::make_unique<CudaBackend>(model, numerics, slots, pages, exact);
#else
  (void)model, (void)numerics, (void)slots, (void)pages, (void)exact;
  fail("--device cuda: this moeserve was built without the CUDA backend (MOESERVE_CUDA=OFF)");
#endif
}

}  // namespace moeserve::engine
