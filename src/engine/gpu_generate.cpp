#include "engine/gpu_generate.h"

#include <algorithm>
#include <random>

#include "core/error.h"

#if MOESERVE_WITH_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "model/gpu_model.h"
#endif

namespace moeserve::engine {

#if MOESERVE_WITH_CUDA
namespace {

using model::GpuKvCache;
using model::GpuModel;

GenerateResult run_generate(GpuModel& m, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                            const CudaRunOptions& run) {
  validate(o.sampling);
  check(!prompt.empty(), "the prompt is empty");
  check(o.max_new_tokens >= 1, "max_new_tokens must be >= 1, got {}", o.max_new_tokens);
  const int64_t vocab = m.config().vocab_size, P = int64_t(prompt.size());
  const int64_t total = P + o.max_new_tokens;
  GpuKvCache cache(m.kv_layout(), 1, (total + 255) / 256 + 1);
  cache::SequenceKv seq = cache.host().open_sequence();
  check(cache.host().reserve(seq, total), "internal: GPU cache too small");
  std::mt19937_64 rng(o.seed);
  cuda::DeviceArray<int> token(1, "sampled token");
  cuda::DeviceArray<cuda::SampleRow> row(1, "sampling settings");
  cuda::DeviceBuffer work(cuda::sample_work_bytes(1, int(vocab)), "sampling workspace");
  GenerateResult result;
  std::vector<float> kept;
  std::vector<int64_t> first, count;
  auto step = [&](std::span<const int32_t> tokens, bool all) {
    model::ForwardRequest req;
    req.seq = &seq;
    req.tokens = tokens;
    req.all_logits = all;
    m.forward_async(cache, {req}, &first, &count, run.cuda_graphs, total);
    seq.length += int64_t(tokens.size());
    if (o.keep_logits) {
      const size_t n = size_t(m.logit_rows() * vocab);
      const size_t old = kept.size();
      kept.resize(old + n);
      cuda::copy_to_host(kept.data() + old, m.logits_device(), n * sizeof(float), m.stream(), "logits");
    }
  };
  auto sample = [&]() {
    const float* last = m.logits_device() + (m.logit_rows() - 1) * vocab;
    cuda::SampleRow settings;
    settings.temperature = o.sampling.temperature;
    settings.top_p = o.sampling.top_p;
    settings.top_k = int(o.sampling.top_k);
    settings.u = sampling_uniform(o.sampling, rng);
    row.upload(std::span<const cuda::SampleRow>(&settings, 1), m.stream());
    MOESERVE_CUDA_CHECK(
        cuda::sample_rows(last, 1, int(vocab), row.data(), token.data(), nullptr, work.data(), m.stream(),
                          cuda::sample_steps(&settings, 1)));
    return token.download(m.stream())[0];
  };
  const int64_t chunk = o.prefill_chunk > 0 ? o.prefill_chunk : P;
  for (int64_t b = 0; b < P; b += chunk)
    step(std::span<const int32_t>(prompt.data() + b, size_t(std::min(chunk, P - b))), o.keep_logits);
  result.finish_reason = "length";
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int32_t tok = sample();
    result.output_ids.push_back(tok);
    if (std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), tok) != o.stop_token_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    if (i + 1 == o.max_new_tokens) break;
    step(std::span<const int32_t>(&result.output_ids.back(), 1), true);
  }
  if (o.keep_logits) result.logits = Tensor::from_f32({int64_t(kept.size()) / vocab, vocab}, kept);
  return result;
}

}  // namespace

GenerateResult generate_cuda(const model::Model& model, const std::vector<int32_t>& prompt,
                             const GenerateOptions& options, const CudaRunOptions& run) {
  auto m = GpuModel::from_model(model, {run.exact, options.numerics});
  return run_generate(*m, prompt, options, run);
}

Tensor all_logits_cuda(const model::Model& model, const std::vector<int32_t>& ids, int64_t chunk,
                       const model::Numerics& numerics, const CudaRunOptions& run) {
  auto m = GpuModel::from_model(model, {run.exact, numerics});
  const int64_t n = int64_t(ids.size()), vocab = m->config().vocab_size;
  check(n > 0, "no tokens");
  if (chunk <= 0) chunk = n;
  GpuKvCache cache(m->kv_layout(), 1, (n + 255) / 256 + 1);
  cache::SequenceKv seq = cache.host().open_sequence();
  check(cache.host().reserve(seq, n), "internal: GPU cache too small");
  Tensor out = Tensor::empty(DType::F32, {n, vocab});
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    model::ForwardRequest req;
    req.seq = &seq;
    req.tokens = std::span<const int32_t>(ids.data() + begin, size_t(count));
    req.all_logits = true;
    model::ForwardResult r = m->forward(cache, {req});
    std::copy_n(r.logits.f32(), count * vocab, out.f32() + begin * vocab);
    seq.length += count;
  }
  return out;
}

GenerateResult generate_cuda_dummy(const io::ModelConfig& config, int64_t num_layers,
                                   const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                   const CudaRunOptions& run) {
  auto m = GpuModel::dummy(config, num_layers, options.seed + 1, {run.exact, options.numerics});
  return run_generate(*m, prompt, options, run);
}

#else

GenerateResult generate_cuda(const model::Model&, const std::vector<int32_t>&, const GenerateOptions&,
                             const CudaRunOptions&) {
  fail("--device cuda: this moeserve was built without the CUDA backend (no nvcc at build time)");
}
Tensor all_logits_cuda(const model::Model&, const std::vector<int32_t>&, int64_t, const model::Numerics&,
                       const CudaRunOptions&) {
  fail("--device cuda: this moeserve was built without the CUDA backend (no nvcc at build time)");
}
GenerateResult generate_cuda_dummy(const io::ModelConfig&, int64_t, const std::vector<int32_t>&, const GenerateOptions&,
                                   const CudaRunOptions&) {
  fail("--load-format dummy needs the CUDA backend; this moeserve was built without it");
}

#endif

}  // namespace moeserve::engine
