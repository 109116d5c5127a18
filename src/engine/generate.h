#pragma once
// Single-sequence generation on the reference path (the `generate` command and parity tests): prefill in
// chunks of `chunk` tokens, then decode one token at a time, greedy or sampled.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace moeserve::engine {

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  SamplingParams sampling{0.0f, 1.0f, 0};
  uint64_t seed = 0;
  int64_t prefill_chunk = 0;  // 0: the whole prompt at once
  bool keep_logits = false;   // logits at every position of prompt + generated except the last
  std::vector<int64_t> stop_token_ids;
  model::Numerics numerics;
};

struct GenerateResult {
  std::vector<int32_t> output_ids;
  std::string finish_reason;  // "length" | "stop"
  Tensor logits;              // [P + N - 1, vocab] when keep_logits
};

GenerateResult generate(const model::Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);

// Logits at every position of `ids` (as one forward, or in chunks of `chunk` tokens), for parity tests.
Tensor all_logits(const model::Model& model, const std::vector<int32_t>& ids, int64_t chunk,
                  const model::Numerics& numerics);

}  // namespace moeserve::engine
