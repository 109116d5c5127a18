#pragma once
// What the engine runs a step on: the model's forward over a batch of sequence chunks, and the KV cache whose
// slots and pages the scheduler hands out. The CPU backend is the reference path (pools in host memory); the
// CUDA backend runs the same contract on one Hopper GPU (pools on the device, bookkeeping on the host).
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/model.h"

namespace moeserve::engine {

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  virtual std::string name() const = 0;
  virtual const io::ModelConfig& config() const = 0;
  virtual bool has_mtp() const = 0;
  // Slots and pages (and, on the CPU, the pools themselves).
  virtual cache::KvCache& cache() = 0;
  virtual int64_t kv_bytes() const = 0;
  virtual model::ForwardResult forward(const std::vector<model::ForwardRequest>& requests,
                                       const model::Numerics& numerics) = 0;
  // Whether forward honours ForwardRequest::sample (draws tokens where the logits are, returning tokens instead
  // of logits); the CPU backend does not (its logits are already where the sampler runs).
  virtual bool samples_on_device() const { return false; }
  // Throws when the backend has no MTP path.
  virtual model::ForwardResult mtp_forward(const std::vector<model::MtpRequest>& requests,
                                           const model::Numerics& numerics) = 0;
};

// The reference model with its KV pools in host memory (speculative_tokens: verify headroom, 0 = off).
std::unique_ptr<ForwardBackend> make_cpu_backend(std::shared_ptr<const model::Model> model, int64_t speculative_tokens,
                                                 int64_t slots, int64_t pages);
// The model's weights uploaded to the GPU, KV pools on the device. Throws a clear error in a build without the
// CUDA backend or on a machine without a supported GPU. No speculative decoding (the MTP layer is CPU-only).
// exact: the parity GEMMs (fp32 activations everywhere); otherwise the fast ones (cuBLASLt past 8 rows, MXFP4
// experts through the W4A8 GEMM under FP8 activations), see model/gpu_model.h. graphs: decode steps (one token per
// request) replay a CUDA graph captured per batch size.
std::unique_ptr<ForwardBackend> make_cuda_backend(const model::Model& model, const model::Numerics& numerics,
                                                  int64_t slots, int64_t pages, bool exact = true, bool graphs = true);
// The same over random weights of `config`'s shapes created on the GPU (--load-format dummy: performance work
// without a checkpoint; model::GpuModel::dummy picks the weight types).
std::unique_ptr<ForwardBackend> make_cuda_dummy_backend(const io::ModelConfig& config, uint64_t seed,
                                                        const model::Numerics& numerics, int64_t slots, int64_t pages,
                                                        bool exact = true, bool graphs = true);

}  // namespace moeserve::engine
