#pragma once
// A generation request inside the engine and the events it streams back.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/sampler.h"
#include "engine/text_decoder.h"

namespace moeserve::engine {

struct GenerationParams {
  SamplingParams sampling;
  std::optional<uint64_t> seed;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // no stop token is drawn, and no stop checked, before this many tokens (vLLM's)
  std::vector<int64_t> stop_token_ids;   // in addition to the model's EOS (unless ignore_eos)
  std::vector<std::string> stop_strings;  // output ends before the first occurrence
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  int logprobs = -1;  // >= 0: each generated token's logprob and this many alternatives (TokenLogprobs); -1: none
  int prompt_logprobs = -1;  // >= 0: the same for the prompt's tokens from the second on (in the first event)
};

enum class FinishReason { None, Stop, Length, Abort, Error };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

// One update to a request, delivered on the engine thread. text is new text only.
struct RequestEvent {
  std::string text;
  std::vector<int32_t> token_ids;  // tokens generated in this step
  std::vector<TokenLogprobs> logprobs;  // one per token id, when GenerationParams::logprobs >= 0
  std::vector<TokenLogprobs> prompt_logprobs;  // prompt[1..P), in a request's first event (prompt_logprobs >= 0)
  FinishReason finish = FinishReason::None;
  std::string error;               // when finish == Error
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;   // so far
  // Speculative decoding: target verify steps and accepted draft tokens so far (0 when off).
  uint64_t spec_verify_steps = 0;
  uint64_t spec_accepted_tokens = 0;
};
using EventSink = std::function<void(const RequestEvent&)>;

using Clock = std::chrono::steady_clock;

struct Request {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  GenerationParams params;
  EventSink sink;
  Clock::time_point arrival;

  // Running state.
  cache::SequenceKv seq;
  int64_t prefilled = 0;              // prompt tokens already in the KV state
  std::vector<int32_t> output;        // generated tokens
  std::optional<int32_t> pending;     // sampled but not yet fed to the model
  std::mt19937_64 rng;
  std::unique_ptr<IncrementalTextDecoder> decoder;
  std::string text;                   // generated text so far (not yet streamed tail included)
  size_t streamed = 0;                // bytes of `text` already sent
  std::optional<Clock::time_point> first_token_time;
  Clock::time_point last_token_time;

  // Speculative decoding (MTP): the target's final hc streams for positions [mtp_pos, mtp_pos + rows) whose
  // MTP KV entries are not yet computed (they are, exactly, at the next draft step).
  int64_t mtp_pos = 0;
  std::vector<float> mtp_hidden;
  uint64_t spec_verify_steps = 0, spec_accepted = 0;
  std::vector<TokenLogprobs> prompt_logprobs;  // gathered while prefilling, sent with the first event

  // Token at `position` of prompt + output.
  int32_t token_at(int64_t position) const {
    return position < int64_t(prompt.size()) ? prompt[size_t(position)] : output[size_t(position - int64_t(prompt.size()))];
  }

  bool prefilling() const { return prefilled < int64_t(prompt.size()); }
  int64_t total_tokens() const { return int64_t(prompt.size()) + params.max_tokens; }
};

}  // namespace moeserve::engine
