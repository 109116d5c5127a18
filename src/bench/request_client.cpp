#include "bench/request_client.h"

#include <chrono>

#include <fmt/format.h>
#include <httplib.h>

#include "bench/http_error.h"
#include "bench/sse.h"
#include "bench/stream_timer.h"

namespace moeserve::bench {
namespace {
using Clock = std::chrono::steady_clock;
constexpr size_t kMaxErrorBody = 2000;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

class Registration {
 public:
  Registration(CancelSource* source, httplib::Client* client) : source_(source), client_(client) {
    if (source_) source_->add(client_);
  }
  ~Registration() {
    if (source_) source_->remove(client_);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  CancelSource* source_;
  httplib::Client* client_;
};
}  // namespace

void CancelSource::cancel() {
  cancelled_.store(true);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* client : clients_) client->stop();
}

void CancelSource::add(httplib::Client* client) {
  std::lock_guard<std::mutex> lock(mutex_);
  clients_.insert(client);
}

void CancelSource::remove(httplib::Client* client) {
  std::lock_guard<std::mutex> lock(mutex_);
  clients_.erase(client);
}

nlohmann::json build_payload(const RequestSettings& settings, const Prompt& prompt, int output_len) {
  nlohmann::json body = {{"model", settings.model}, {"temperature", 0.0}, {"stream", settings.stream}};
  if (settings.api == Api::kChat) {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt.text}}});
    body["max_completion_tokens"] = output_len;
    body["max_tokens"] = output_len;  // servers that predate max_completion_tokens
  } else {
    if (prompt.as_ids)
      body["prompt"] = prompt.ids;
    else
      body["prompt"] = prompt.text;
    body["max_tokens"] = output_len;
  }
  body["ignore_eos"] = settings.ignore_eos;
  if (settings.stream)
    body["stream_options"] = {{"include_usage", true}, {"continuous_usage_stats", true}};
  for (auto it = settings.extra_body.begin(); it != settings.extra_body.end(); ++it) body[it.key()] = it.value();
  return body;
}

RequestOutput send_request(const Endpoint& endpoint, const RequestSettings& settings, const Prompt& prompt,
                           int output_len, CancelSource* cancel) {
  RequestOutput out;
  out.prompt_len = prompt.prompt_len;
  out.output_len = output_len;
  const Api api = settings.api;
  auto client = make_client(endpoint, settings.timeout_s);
  Registration registration(cancel, client.get());

  httplib::Request req;
  req.method = "POST";
  req.path = endpoint.path(api == Api::kChat ? "/v1/chat/completions" : "/v1/completions");
  req.headers = {{"Content-Type", "application/json"},
                 {"Accept", settings.stream ? "text/event-stream" : "application/json"}};
  req.body = build_payload(settings, prompt, output_len).dump();

  int status = 0;
  std::string error_body, full_body;
  SseReader sse;
  StreamTimer timer(api);
  bool stream_rejected = false;
  Clock::time_point last_read;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return !(cancel && cancel->cancelled());
  };
  Clock::time_point st;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (cancel && cancel->cancelled()) return false;
    if (status != 200) {
      if (error_body.size() < kMaxErrorBody) error_body.append(data, std::min(n, kMaxErrorBody - error_body.size()));
      return true;
    }
    last_read = now;
    if (!settings.stream) {
      full_body.append(data, n);
      return true;
    }
    for (const std::string& payload : sse.feed(std::string_view(data, n))) {
      if (!timer.on_message(payload, seconds_between(st, now))) {
        stream_rejected = true;
        return false;
      }
    }
    return true;
  };

  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (cancel && cancel->cancelled()) {
    out.cancelled = true;
    out.error = "cancelled before it was sent";
    return out;
  }
  st = Clock::now();  // as SGLang: just before the POST
  const bool sent = client->send(req, res, error);
  const Clock::time_point end = Clock::now();

  if (cancel && cancel->cancelled() && !(sent && status == 200 && !stream_rejected && res.status == 200)) {
    out.cancelled = true;
    out.error = "cancelled (interrupted)";
    return out;
  }
  if (stream_rejected) {
    timer.finish(out, output_len);
    return out;
  }
  if (!sent) {
    out.success = false;
    out.error = status != 0 && status != 200
                    ? fmt::format("HTTP {} then {}: {}", status, describe(error), error_body)
                    : fmt::format("{}{}", describe(error), status == 200 ? " in the middle of the response stream" : "");
    return out;
  }
  if (res.status != 200) {
    out.success = false;
    out.error = fmt::format("HTTP {}{}{}", res.status, error_body.empty() ? "" : ": ", error_body);
    return out;
  }
  if (settings.stream) {
    for (const std::string& payload : sse.finish()) {
      if (!timer.on_message(payload, seconds_between(st, last_read))) break;
    }
    timer.finish(out, output_len);
    return out;
  }
  std::string text, parse_error;
  std::optional<long long> tokens;
  if (!parse_full_response(api, full_body, text, tokens, parse_error)) {
    out.success = false;
    out.error = parse_error;
    return out;
  }
  out.success = true;
  out.latency = seconds_between(st, end);
  out.ttft = out.latency;  // non-streaming: TTFT is the whole latency, as SGLang
  out.generated_text = std::move(text);
  out.output_len = tokens ? static_cast<int>(*tokens) : output_len;
  out.output_len_from_usage = tokens.has_value();
  return out;
}

}  // namespace moeserve::bench
