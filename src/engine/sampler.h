#pragma once
// Next-token sampling from fp32 logits: greedy (temperature 0), or temperature + top-k + top-p with a
// per-request random stream (seeded for reproducibility). Semantics as in vLLM/SGLang: top-k first, then
// top-p over the renormalised top-k distribution; ties in greedy go to the lowest id.
#include <cstdint>
#include <random>

namespace moeserve::engine {

struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;  // (0, 1]
  int64_t top_k = 0;   // 0 or -1: off
  bool greedy() const { return temperature <= 0.0f; }
};

// Validates ranges; throws moeserve::Error naming the field.
void validate(const SamplingParams& params);

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params, std::mt19937_64& rng);

// The probability distribution sample_token draws from (for the speculative-decoding acceptance rule and
// tests): probs[vocab], zero outside the top-k/top-p set.
void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params, float* probs);

}  // namespace moeserve::engine
