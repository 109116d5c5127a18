#include "bench/stream_timer.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace moeserve::bench {
namespace {
using nlohmann::json;

std::string excerpt(std::string_view s) {
  constexpr size_t kMax = 200;
  return s.size() <= kMax ? std::string(s) : std::string(s.substr(0, kMax)) + "...";
}

std::string string_field(const json& object, const char* key) {
  if (!object.is_object()) return {};
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The text a chunk (or a complete response, `delta_key` "message") carries for this API.
std::string chunk_text(Api api, const json& body, const char* delta_key) {
  auto choices = body.find("choices");
  if (choices == body.end() || !choices->is_array() || choices->empty()) return {};
  const json& choice = (*choices)[0];
  if (api == Api::kCompletions) return string_field(choice, "text");
  auto delta = choice.is_object() ? choice.find(delta_key) : choice.end();
  if (!choice.is_object() || delta == choice.end()) return {};
  return string_field(*delta, "reasoning_content") + string_field(*delta, "content");
}

std::optional<long long> completion_tokens(const json& body) {
  auto usage = body.find("usage");
  if (usage == body.end() || !usage->is_object()) return std::nullopt;
  auto tokens = usage->find("completion_tokens");
  if (tokens == usage->end() || !tokens->is_number_integer()) return std::nullopt;
  return tokens->get<long long>();
}

std::string error_message(const json& body) {
  auto err = body.find("error");
  if (err == body.end() || err->is_null()) return {};
  if (err->is_object() && err->contains("message") && (*err)["message"].is_string())
    return (*err)["message"].get<std::string>();
  return err->dump();
}
}  // namespace

bool StreamTimer::on_message(std::string_view payload, double t) {
  any_message_ = true;
  last_message_ = t;
  if (payload == "[DONE]") return true;
  json body = json::parse(payload, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    error_ = "malformed stream message: " + excerpt(payload);
    return false;
  }
  if (std::string message = error_message(body); !message.empty()) {
    error_ = "error in stream: " + message;
    return false;
  }
  const auto chunk_tokens = completion_tokens(body);
  if (chunk_tokens) usage_tokens_ = chunk_tokens;
  const std::string text = chunk_text(api_, body, "delta");
  if (text.empty()) return true;
  if (chunk_tokens) usage_on_text_chunks_ = true;
  if (!seen_text_) {
    seen_text_ = true;
    ttft_ = t;
    tokens_at_last_text_ = usage_tokens_.value_or(1);
  } else {
    long long tokens = 1;
    if (usage_tokens_) {
      tokens = std::max<long long>(1, *usage_tokens_ - tokens_at_last_text_);
      tokens_at_last_text_ = *usage_tokens_;
    } else {
      tokens_at_last_text_ += 1;
    }
    const double gap = t - last_text_;
    gaps_.push_back(gap);
    for (long long i = 0; i < tokens; ++i) itl_.push_back(gap / static_cast<double>(tokens));
  }
  last_text_ = t;
  text_ += text;
  return true;
}

std::vector<double> StreamTimer::spread_over_final_count() const {
  if (usage_on_text_chunks_ || !usage_tokens_ || gaps_.empty()) return {};
  const long long later_tokens = *usage_tokens_ - 1;  // the first chunk is taken to carry one token
  const auto chunks = static_cast<long long>(gaps_.size());
  if (later_tokens <= chunks) return {};
  // Chunk i (1-based) ends at token ⌊i·T'/C + 1/2⌋ of the T' later tokens: every chunk gets at least one.
  std::vector<double> itl;
  itl.reserve(static_cast<size_t>(later_tokens));
  long long previous_end = 0;
  for (long long i = 1; i <= chunks; ++i) {
    const long long end = (2 * i * later_tokens + chunks) / (2 * chunks);
    const long long k = end - previous_end;
    previous_end = end;
    for (long long j = 0; j < k; ++j) itl.push_back(gaps_[static_cast<size_t>(i - 1)] / static_cast<double>(k));
  }
  return itl;
}

void StreamTimer::finish(RequestOutput& out, int requested_len) const {
  if (!error_.empty()) {
    out.success = false;
    out.error = error_;
    return;
  }
  if (!any_message_) {
    out.success = false;
    out.error = "the response stream ended without any data message";
    return;
  }
  out.success = true;
  out.ttft = ttft_;
  out.latency = last_message_;
  const std::vector<double> spread = spread_over_final_count();
  out.itl = spread.empty() ? itl_ : spread;
  out.generated_text = text_;
  out.output_len = usage_tokens_ ? static_cast<int>(*usage_tokens_) : requested_len;
  out.output_len_from_usage = usage_tokens_.has_value();
}

bool parse_full_response(Api api, std::string_view body_text, std::string& text, std::optional<long long>& tokens,
                         std::string& error) {
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    error = "malformed response body: " + excerpt(body_text);
    return false;
  }
  if (std::string message = error_message(body); !message.empty()) {
    error = "error in response: " + message;
    return false;
  }
  text = chunk_text(api, body, "message");
  tokens = completion_tokens(body);
  return true;
}

}  // namespace moeserve::bench
