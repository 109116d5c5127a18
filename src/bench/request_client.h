#pragma once
// One benchmark request: builds the OpenAI body as sglang.bench_serving does (temperature 0,
// ignore_eos unless disabled, max_tokens = the output length, streaming with usage), sends it, and
// reads the SSE stream piece by piece, timestamping every network read (steady clock).
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/backend.h"
#include "bench/endpoint.h"
#include "bench/metrics.h"

namespace moeserve::bench {

// One dataset row: the prompt as text, or as token ids (sent as the completions `prompt` list).
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
  bool as_ids = false;
  int prompt_len = 0;  // exact token count of the prompt
  int output_len = 0;  // requested output tokens
};

struct RequestSettings {
  Api api = Api::kCompletions;
  std::string model;
  bool stream = true;
  bool ignore_eos = true;
  nlohmann::json extra_body = nlohmann::json::object();  // merged last, overriding the defaults
  double timeout_s = 6 * 3600.0;                         // SGLang's client allows 6 hours per request
};

nlohmann::json build_payload(const RequestSettings& settings, const Prompt& prompt, int output_len);

// Ctrl-C: cancel() marks every request, present and future, as cancelled and shuts the sockets of the
// ones in flight so that a blocked read returns at once. Safe to call from any thread (not from a
// signal handler: the handler sets a flag that the dispatcher turns into cancel()).
class CancelSource {
 public:
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  void add(httplib::Client* client);
  void remove(httplib::Client* client);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::set<httplib::Client*> clients_;
};

// Sends one request; never throws for server or transport faults (they become a failed output).
RequestOutput send_request(const Endpoint& endpoint, const RequestSettings& settings, const Prompt& prompt,
                           int output_len, CancelSource* cancel = nullptr);

}  // namespace moeserve::bench
