#pragma once
// One OpenAI completion response assembled from the engine's events for its n choices (each choice one engine
// request): SSE chunks as they come when streaming, else the whole body once every choice has finished. The
// engine thread calls on_event, the HTTP thread next(). An error in any choice ends the response with that error
// (the caller aborts the choices still unfinished).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/openai_request.h"

namespace moeserve::server {

// What every chunk or body of the response repeats, and how it is sent.
struct ResponseHeader {
  ApiKind kind = ApiKind::Completion;
  std::string id;
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // streaming: a last chunk with the usage
  bool logprobs = false;       // the events carry TokenLogprobs, shown in OpenAI's form for the API
  std::function<std::string(int32_t)> token_bytes;  // a token's bytes (may be part of a UTF-8 sequence)
  // Completions' echo: the prompt's text before each choice's output, and its first token (the one logprobs
  // entry without a value; the others come in the first event's prompt_logprobs).
  bool echo = false;
  std::string echo_text;
  int32_t echo_first_token = -1;
};

// OpenAI's usage object; with speculative decoding also SGLang's verify steps and accept length.
nlohmann::json usage_json(int64_t prompt, int64_t completion, uint64_t spec_steps = 0);

class CompletionResponse {
 public:
  CompletionResponse(ResponseHeader header, int choices);

  // Engine thread: an event of choice `choice`'s request.
  void on_event(int choice, const engine::RequestEvent& e);
  // HTTP thread: waits up to `wait` for something to send and returns it (SSE events, [DONE] after the last; or
  // the whole JSON body). *finished is set once the response is complete; next() is not called after that.
  std::string next(std::chrono::milliseconds wait, bool* finished);
  // The choices whose requests have not finished (to abort when the client goes away or another choice failed).
  std::vector<int> unfinished() const;

 private:
  struct Choice {
    std::string text;  // whole output (not streaming)
    engine::FinishReason finish = engine::FinishReason::None;
    bool sent_first = false;
    bool echoed = false;
    int64_t completion_tokens = 0;
    uint64_t spec_verify_steps = 0;
    nlohmann::json logprobs;  // all of them so far (not streaming), in the API's form
    int64_t text_offset = 0;  // completions: bytes of token text before the next token
  };
  // The API's logprobs object for `tokens` (completions: tokens, token_logprobs, top_logprobs,
  // text_offset; chat: content entries with token, logprob, bytes, top_logprobs).
  // text_offset: bytes of the choice's token text before the first of `tokens` (advanced past them).
  nlohmann::json logprobs_json(const std::vector<engine::TokenLogprobs>& tokens, int64_t& text_offset) const;
  static void append_logprobs(nlohmann::json& all, const nlohmann::json& more);
  // id, object (a chunk's or the body's), created, model and the choices: what every chunk and the body carry.
  nlohmann::json envelope(bool chunk, nlohmann::json choices) const;
  nlohmann::json chunk(int choice, const std::string& text, const char* finish, bool with_role,
                       nlohmann::json logprobs = nullptr) const;
  nlohmann::json usage() const;  // mutex_ held
  nlohmann::json body() const;   // mutex_ held

  const ResponseHeader header_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::string> events_;  // SSE events ready to send (streaming)
  std::vector<Choice> choices_;
  int64_t prompt_tokens_ = 0;
  int finished_ = 0;
  std::string error_;
  bool done_ = false;  // every choice finished, or one failed
};

}  // namespace moeserve::server
