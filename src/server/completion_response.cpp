#include "server/completion_response.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"
#include "server/json_text.h"

namespace moeserve::server {

using nlohmann::json;

json usage_json(int64_t prompt, int64_t completion, uint64_t spec_steps) {
  json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  if (spec_steps > 0) {  // speculative decoding: verify steps and tokens per step (SGLang's accept length)
    u["spec_verify_steps"] = spec_steps;
    u["spec_accept_length"] = double(completion) / double(spec_steps);
  }
  return u;
}

CompletionResponse::CompletionResponse(ResponseHeader header, int choices)
    : header_(std::move(header)), choices_(size_t(choices)) {}

json CompletionResponse::logprobs_json(const std::vector<engine::TokenLogprobs>& tokens, int64_t& text_offset) const {
  auto text_of = [&](int32_t id) { return header_.token_bytes ? header_.token_bytes(id) : "token_id:" + std::to_string(id); };
  auto bytes_of = [&](int32_t id) {
    json b = json::array();
    for (unsigned char ch : text_of(id)) b.push_back(int(ch));
    return b;
  };
  if (header_.kind == ApiKind::Chat) {
    json content = json::array();
    for (const engine::TokenLogprobs& t : tokens) {
      json top = json::array();
      for (const auto& [id, lp] : t.top) top.push_back({{"token", text_of(id)}, {"logprob", lp}, {"bytes", bytes_of(id)}});
      content.push_back(
          {{"token", text_of(t.token)}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    }
    return json{{"content", content}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const engine::TokenLogprobs& t : tokens) {
    const std::string text = text_of(t.token);
    out["tokens"].push_back(text);
    if (std::isnan(t.logprob)) {  // the echoed prompt's first token: nothing predicts it
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
    } else {
      out["token_logprobs"].push_back(t.logprob);
      json top = json::object();  // keyed by token text, as OpenAI's legacy form is (equal texts: the likelier)
      for (const auto& [id, lp] : t.top)
        if (!top.contains(text_of(id))) top[text_of(id)] = lp;
      out["top_logprobs"].push_back(top);
    }
    out["text_offset"].push_back(text_offset);
    text_offset += int64_t(text.size());
  }
  return out;
}

void CompletionResponse::append_logprobs(json& all, const json& more) {
  if (all.is_null()) {
    all = more;
    return;
  }
  for (auto& [key, values] : more.items())
    for (const auto& v : values) all[key].push_back(v);
}

json CompletionResponse::envelope(bool chunk, json choices) const {
  const char* object = header_.kind == ApiKind::Completion ? "text_completion"
                       : chunk                             ? "chat.completion.chunk"
                                                           : "chat.completion";
  return json{{"id", header_.id},
              {"object", object},
              {"created", header_.created},
              {"model", header_.model},
              {"choices", std::move(choices)}};
}

json CompletionResponse::chunk(int choice, const std::string& text, const char* finish, bool with_role,
                               json logprobs) const {
  json c = {{"index", choice}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
  if (header_.kind == ApiKind::Chat) {
    json delta = json::object();
    if (with_role) delta["role"] = "assistant";
    if (!text.empty() || with_role) delta["content"] = text;
    c["delta"] = delta;
  } else {
    c["text"] = text;
  }
  return envelope(/*chunk=*/true, json::array({c}));
}

// The prompt once (every choice has the same), the completions of all choices.
json CompletionResponse::usage() const {
  int64_t completion = 0;
  uint64_t steps = 0;
  for (const Choice& c : choices_) {
    completion += c.completion_tokens;
    steps += c.spec_verify_steps;
  }
  return usage_json(prompt_tokens_, completion, steps);
}

json CompletionResponse::body() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    int64_t none = 0;
    json c = {{"index", i},
              {"logprobs", header_.logprobs && choices_[i].logprobs.is_null() ? logprobs_json({}, none)
                                                                               : choices_[i].logprobs},
              {"finish_reason", engine::finish_reason_name(choices_[i].finish)}};
    if (header_.kind == ApiKind::Chat)
      c["message"] = {{"role", "assistant"}, {"content", choices_[i].text}};
    else
      c["text"] = choices_[i].text;
    choices.push_back(std::move(c));
  }
  json out = envelope(/*chunk=*/false, std::move(choices));
  out["usage"] = usage();
  return out;
}

void CompletionResponse::on_event(int choice, const engine::RequestEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_) return;  // another choice failed: the response has ended
  Choice& c = choices_[size_t(choice)];
  prompt_tokens_ = e.prompt_tokens;
  c.completion_tokens = e.completion_tokens;
  c.spec_verify_steps = e.spec_verify_steps;
  if (e.finish == engine::FinishReason::Error) {
    c.finish = e.finish;
    error_ = e.error;
    done_ = true;
    if (header_.stream) events_.push_back(sse(error_body("internal_server_error", e.error, "", 500)));
    ready_.notify_all();
    return;
  }
  const bool finished = e.finish != engine::FinishReason::None;
  std::string text = e.text;
  std::vector<engine::TokenLogprobs> entries;
  if (header_.echo && !c.echoed) {  // the first event: the prompt before the output
    c.echoed = true;
    text = header_.echo_text + text;
    if (header_.logprobs) {
      entries.push_back({header_.echo_first_token, std::numeric_limits<float>::quiet_NaN(), {}});
      entries.insert(entries.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
    }
  }
  entries.insert(entries.end(), e.logprobs.begin(), e.logprobs.end());
  json logprobs = header_.logprobs && !entries.empty() ? logprobs_json(entries, c.text_offset) : json(nullptr);
  if (header_.stream) {
    if (!text.empty() || !c.sent_first || !logprobs.is_null()) {
      events_.push_back(
          sse(chunk(choice, text, nullptr, !c.sent_first && header_.kind == ApiKind::Chat, std::move(logprobs))));
      c.sent_first = true;
    }
    if (finished) events_.push_back(sse(chunk(choice, "", engine::finish_reason_name(e.finish), false)));
  } else {
    c.text += text;
    if (!logprobs.is_null()) append_logprobs(c.logprobs, logprobs);
  }
  if (finished) {
    c.finish = e.finish;
    if (++finished_ == int(choices_.size())) {
      done_ = true;
      if (header_.stream && header_.include_usage) {
        json last = envelope(/*chunk=*/true, json::array());
        last["usage"] = usage();
        events_.push_back(sse(last));
      }
    }
  }
  ready_.notify_all();
}

std::string CompletionResponse::next(std::chrono::milliseconds wait, bool* finished) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, wait, [&] { return !events_.empty() || done_; });
  std::string out;
  *finished = false;
  if (header_.stream) {
    for (; !events_.empty(); events_.pop_front()) out += events_.front();
    if (done_) {
      out += "data: [DONE]\n\n";
      *finished = true;
    }
  } else if (done_) {
    out = dump(error_.empty() ? body() : error_body("internal_server_error", error_, "", 500));
    *finished = true;
  }
  return out;
}

std::vector<int> CompletionResponse::unfinished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int> out;
  for (size_t i = 0; i < choices_.size(); ++i)
    if (choices_[i].finish == engine::FinishReason::None) out.push_back(int(i));
  return out;
}

}  // namespace moeserve::server
