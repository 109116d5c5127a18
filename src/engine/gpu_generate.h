#pragma once
// generate / all_logits (engine/generate.h) on the CUDA backend: the same options, results and sampling stream
// (the GPU sampler draws with the uniform the CPU sampler would have drawn). Declared without CUDA types so the
// CLI can call it in any build; without the CUDA backend they throw a clear error.
#include <cstdint>
#include <vector>

#include "engine/generate.h"
#include "io/model_config.h"
#include "model/model.h"

namespace moeserve::engine {

struct CudaRunOptions {
  bool exact = true;       // fp32 activations into every GEMM (the parity numerics)
  bool cuda_graphs = false;  // replay a captured graph for decode steps
};

GenerateResult generate_cuda(const model::Model& model, const std::vector<int32_t>& prompt,
                             const GenerateOptions& options, const CudaRunOptions& run = {});
Tensor all_logits_cuda(const model::Model& model, const std::vector<int32_t>& ids, int64_t chunk,
                       const model::Numerics& numerics, const CudaRunOptions& run = {});
// Random weights of `config`'s shapes created on the GPU (--load-format dummy), first num_layers layers (<= 0:
// all); FP8 linears when the config has an FP8 quantization_config (experts FP8 too, or MXFP4 when the config
// says expert_dtype fp4 and run.exact is off), else BF16.
GenerateResult generate_cuda_dummy(const io::ModelConfig& config, int64_t num_layers, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options, const CudaRunOptions& run = {});

}  // namespace moeserve::engine
