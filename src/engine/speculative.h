#pragma once
// Verifying draft tokens (speculative decoding with top-1 drafts). The target's logits at the k+1 verify
// positions decide how many drafts survive:
//  - greedy: drafts are accepted while they equal the target's argmax; then the target's own next token;
//  - sampling: draft d (a point mass, since drafts are top-1) is accepted with probability p(d) under the
//    target's sampling distribution p; on rejection the replacement is drawn from p with d removed,
//    renormalised. This is the standard rejection rule specialised to a deterministic draft, so every emitted
//    token is distributed exactly as sampling without speculation.
#include <cstdint>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace moeserve::engine {

// logits: [k + 1, vocab] at the verify positions; drafts: k tokens. Returns the tokens to emit: the accepted
// drafts followed by one token from the target (1..k+1 tokens).
std::vector<int32_t> verify_drafts(const float* logits, int64_t vocab, const std::vector<int32_t>& drafts,
                                   const SamplingParams& sampling, std::mt19937_64& rng);

// One step of the rejection rule, exposed for tests: given p (the target distribution) and draft d, returns d
// (accepted) or a replacement drawn from p without d.
int32_t accept_or_replace(const std::vector<float>& p, int32_t draft, std::mt19937_64& rng, bool* accepted);

// Running acceptance statistics (for /metrics, usage and `moeserve bench`).
struct SpecStats {
  uint64_t verify_steps = 0;     // target verify forwards (per request)
  uint64_t draft_tokens = 0;     // drafts proposed
  uint64_t accepted_tokens = 0;  // drafts accepted
  std::vector<uint64_t> accept_length_histogram;  // [0..k]: accepted drafts per verify
  // Mean tokens emitted per verify step (accepted drafts + the target's token), SGLang's "accept length".
  double mean_accept_length() const {
    return verify_steps ? double(accepted_tokens + verify_steps) / double(verify_steps) : 0.0;
  }
};

}  // namespace moeserve::engine
