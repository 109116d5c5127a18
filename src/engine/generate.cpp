#include "engine/generate.h"

#include <algorithm>
#include <cstring>

namespace moeserve::engine {

namespace {

// A one-sequence cache sized for `tokens`.
struct SoloCache {
  cache::KvCache cache;
  cache::SequenceKv seq;
  SoloCache(const model::Model& model, int64_t tokens)
      : cache(model.kv_layout(), 1, (tokens + 255) / 256 + 1) {
    seq = cache.open_sequence();
    check(cache.reserve(seq, tokens), "internal: solo cache too small");
  }
};

}  // namespace

Tensor all_logits(const model::Model& model, const std::vector<int32_t>& ids, int64_t chunk,
                  const model::Numerics& numerics) {
  const int64_t n = int64_t(ids.size()), vocab = model.config().vocab_size;
  check(n > 0, "no tokens");
  if (chunk <= 0) chunk = n;
  SoloCache solo(model, n);
  Tensor out = Tensor::empty(DType::F32, {n, vocab});
  for (int64_t begin = 0; begin < n; begin += chunk) {
    int64_t count = std::min(chunk, n - begin);
    model::ForwardRequest req;
    req.seq = &solo.seq;
    req.tokens = std::span<const int32_t>(ids.data() + begin, size_t(count));
    req.all_logits = true;
    model::ForwardResult r = model.forward(solo.cache, {req}, numerics);
    std::memcpy(out.f32() + begin * vocab, r.logits.f32(), size_t(count * vocab) * sizeof(float));
    solo.seq.length += count;
  }
  return out;
}

GenerateResult generate(const model::Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  validate(o.sampling);
  check(!prompt.empty(), "the prompt is empty");
  check(o.max_new_tokens >= 1, "max_new_tokens must be >= 1, got {}", o.max_new_tokens);
  const int64_t vocab = model.config().vocab_size, P = int64_t(prompt.size());
  SoloCache solo(model, P + o.max_new_tokens);
  std::mt19937_64 rng(o.seed);
  GenerateResult result;
  std::vector<float> kept;
  auto step = [&](std::span<const int32_t> tokens, bool all) {
    model::ForwardRequest req;
    req.seq = &solo.seq;
    req.tokens = tokens;
    req.all_logits = all;
    model::ForwardResult r = model.forward(solo.cache, {req}, o.numerics);
    solo.seq.length += int64_t(tokens.size());
    if (o.keep_logits) kept.insert(kept.end(), r.logits.f32(), r.logits.f32() + r.logits.numel());
    return r;
  };
  const int64_t chunk = o.prefill_chunk > 0 ? o.prefill_chunk : P;
  model::ForwardResult last;
  for (int64_t b = 0; b < P; b += chunk)
    last = step(std::span<const int32_t>(prompt.data() + b, size_t(std::min(chunk, P - b))), o.keep_logits);
  const float* logits = last.logits.f32() + (last.logits.dim(0) - 1) * vocab;
  result.finish_reason = "length";
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    int32_t token = sample_token(logits, vocab, o.sampling, rng);
    result.output_ids.push_back(token);
    if (std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), token) != o.stop_token_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    if (i + 1 == o.max_new_tokens) break;
    last = step(std::span<const int32_t>(&result.output_ids.back(), 1), true);
    logits = last.logits.f32();
  }
  if (o.keep_logits) {
    int64_t rows = int64_t(kept.size()) / vocab;
    result.logits = Tensor::from_f32({rows, vocab}, kept);
  }
  return result;
}

}  // namespace moeserve::engine
