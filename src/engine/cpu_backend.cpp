#include "engine/forward_backend.h"

namespace moeserve::engine {

namespace {

class CpuBackend : public ForwardBackend {
 public:
  CpuBackend(std::shared_ptr<const model::Model> model, int64_t speculative_tokens, int64_t slots, int64_t pages)
      : model_(std::move(model)), cache_(model_->kv_layout(speculative_tokens), slots, pages) {}
  std::string name() const override { return "cpu"; }
  const io::ModelConfig& config() const override { return model_->config(); }
  bool has_mtp() const override { return model_->has_mtp(); }
  cache::KvCache& cache() override { return cache_; }
  int64_t kv_bytes() const override { return cache_.bytes(); }
  model::ForwardResult forward(const std::vector<model::ForwardRequest>& requests,
                               const model::Numerics& numerics) override {
    return model_->forward(cache_, requests, numerics);
  }
  model::ForwardResult mtp_forward(const std::vector<model::MtpRequest>& requests,
                                   const model::Numerics& numerics) override {
    return model_->mtp_forward(cache_, requests, numerics);
  }

 private:
  std::shared_ptr<const model::Model> model_;
  cache::KvCache cache_;
};

}  // namespace

std::unique_ptr<ForwardBackend> make_cpu_backend(std::shared_ptr<const model::Model> model, int64_t speculative_tokens,
                                                 int64_t slots, int64_t pages) {
  return std::make_unique<CpuBackend>(std::move(model), speculative_tokens, slots, pages);
}

}  // namespace moeserve::engine
