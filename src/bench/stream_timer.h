#pragma once
// Turns the timestamped SSE messages of one streamed response into the request's TTFT, ITL, E2E
// latency and output length. This is where the metric definitions live (see metrics.h):
// - TTFT is the time of the first chunk whose text is non-empty (completions: choices[0].text; chat:
//   choices[0].delta.content or delta.reasoning_content).
// - Each later text-bearing chunk adds its gap from the previous text-bearing chunk to ITL. When the
//   server reports running token counts (usage.completion_tokens in every chunk, vLLM's
//   continuous_usage_stats), a chunk that brought k tokens adds k entries of gap/k, as SGLang's native
//   client does and as the measurement pitfalls call for. When the server reports only a final count
//   T that exceeds the text chunks C (speculative decoding, batched SSE), the T-1 tokens after the
//   first chunk are spread evenly over the C-1 later chunks (largest-remainder rounding), the per-token
//   form of SGLang PR #12064's division by the accept length. Otherwise a chunk counts as one token.
// - E2E latency is the time of the last message, [DONE] included.
// - output_len is the last usage.completion_tokens seen, else the requested length.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/backend.h"
#include "bench/metrics.h"

namespace moeserve::bench {

class StreamTimer {
 public:
  explicit StreamTimer(Api api) : api_(api) {}
  // One data payload received `t` seconds after the request was sent. Returns false, with error()
  // set, when the payload is not valid JSON or carries an error object; the stream should be dropped.
  bool on_message(std::string_view payload, double t);
  // ITL entries when only the final token count is known (see above); empty if it does not apply.
  std::vector<double> spread_over_final_count() const;
  // Writes success/ttft/itl/latency/output_len/generated_text; `requested_len` is max_tokens.
  void finish(RequestOutput& out, int requested_len) const;
  const std::string& error() const { return error_; }

 private:
  Api api_;
  bool any_message_ = false;
  double last_message_ = 0.0;
  bool seen_text_ = false;
  double last_text_ = 0.0;
  double ttft_ = 0.0;
  std::optional<long long> usage_tokens_;
  bool usage_on_text_chunks_ = false;  // running counts seen with text: per-chunk token counts are known
  long long tokens_at_last_text_ = 0;
  std::vector<double> itl_;
  std::vector<double> gaps_;  // one per text chunk after the first
  std::string text_;
  std::string error_;
};

// The text and token count of a complete (non-streamed) response body; false with `error` on bad JSON.
bool parse_full_response(Api api, std::string_view body, std::string& text, std::optional<long long>& tokens,
                         std::string& error);

}  // namespace moeserve::bench
