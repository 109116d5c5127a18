#include "engine/speculative.h"

#include "core/error.h"

namespace moeserve::engine {

int32_t accept_or_replace(const std::vector<float>& p, int32_t draft, std::mt19937_64& rng, bool* accepted) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  double pd = p[size_t(draft)];
  if (uniform(rng) < pd) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  // Residual: p without the draft, renormalised (max(p - q, 0) with q the point mass at the draft).
  double rest = 1.0 - pd, u = uniform(rng) * rest, acc = 0;
  int32_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (int32_t(i) == draft || p[i] <= 0.0f) continue;
    acc += p[i];
    last = int32_t(i);
    if (u < acc) return last;
  }
  check(last >= 0, "rejection sampling: the target distribution has no mass outside the draft");
  return last;
}

std::vector<int32_t> verify_drafts(const float* logits, int64_t vocab, const std::vector<int32_t>& drafts,
                                   const SamplingParams& sampling, std::mt19937_64& rng) {
  std::vector<int32_t> out;
  std::vector<float> p(static_cast<size_t>(vocab));
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const float* row = logits + int64_t(j) * vocab;
    if (j == drafts.size()) {  // every draft accepted: the target's next token
      out.push_back(sample_token(row, vocab, sampling, rng));
      break;
    }
    if (sampling.greedy()) {
      int32_t best = sample_token(row, vocab, sampling, rng);
      out.push_back(best);
      if (best != drafts[j]) break;
      continue;
    }
    sampling_distribution(row, vocab, sampling, p.data());
    bool accepted = false;
    out.push_back(accept_or_replace(p, drafts[j], rng, &accepted));
    if (!accepted) break;
  }
  return out;
}

}  // namespace moeserve::engine
