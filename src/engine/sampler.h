#pragma once
// Next-token sampling from fp32 logits: greedy (temperature 0), or temperature + top-k + top-p with a
// per-request random stream (seeded for reproducibility). Semantics as in vLLM/SGLang: top-k first, then
// top-p over the renormalised top-k distribution; ties in greedy go to the lowest id.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

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
// sample_token as two steps, for a draw made before the logits exist (a backend that samples on the device
// takes u with the forward): the uniform it takes from rng (0 and none taken when greedy), and the token for u.
double sampling_uniform(const SamplingParams& params, std::mt19937_64& rng);
int32_t sample_token_at(const float* logits, int64_t vocab, const SamplingParams& params, double u);

// A generated token's log-probability under the model (log-softmax of the raw logits: before temperature, top-k
// and top-p, as vLLM's default), with the `top` most likely tokens (logprob descending, lower id first). A
// probability that underflows to zero is clamped to kMinLogprob, which JSON can carry (vLLM's -9999).
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};
inline constexpr float kMinLogprob = -9999.0f;
inline constexpr int kMaxTopLogprobs = 20;
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int top);

// The probability distribution sample_token draws from (for the speculative-decoding acceptance rule and
// tests): probs[vocab], zero outside the top-k/top-p set.
void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params, float* probs);

}  // namespace moeserve::engine
