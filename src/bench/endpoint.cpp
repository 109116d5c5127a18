#include "bench/endpoint.h"

#include <cstdlib>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "bench/http_error.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {
constexpr double kProbeTimeoutS = 10.0;

httplib::Result probe(const Endpoint& endpoint, const std::string& path) {
  auto client = make_client(endpoint, kProbeTimeoutS);
  return client->Get(endpoint.path(path));
}
}  // namespace

Endpoint make_endpoint(const std::string& base_url, const std::string& host, int port) {
  Endpoint e;
  if (!base_url.empty()) {
    const auto scheme_end = base_url.find("://");
    check(scheme_end != std::string::npos, "--base-url must start with http:// or https://, got '{}'", base_url);
    const std::string scheme = base_url.substr(0, scheme_end);
    check(scheme == "http" || scheme == "https", "--base-url must start with http:// or https://, got '{}'",
          base_url);
    const auto path_start = base_url.find('/', scheme_end + 3);
    e.origin = base_url.substr(0, path_start);
    check(e.origin.size() > scheme_end + 3, "--base-url has no host: '{}'", base_url);
    if (path_start != std::string::npos) e.prefix = base_url.substr(path_start);
    while (!e.prefix.empty() && e.prefix.back() == '/') e.prefix.pop_back();
    return e;
  }
  check(!host.empty(), "--host must not be empty");
  check(port > 0 && port < 65536, "--port must be in 1..65535, got {}", port);
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  e.origin = fmt::format("http://{}:{}", ipv6 ? "[" + host + "]" : host, port);
  return e;
}

std::unique_ptr<httplib::Client> make_client(const Endpoint& endpoint, double read_timeout_s) {
  auto client = std::make_unique<httplib::Client>(endpoint.origin);
  check(client->is_valid(), "cannot create an HTTP client for '{}'", endpoint.origin);
  const auto whole = static_cast<time_t>(read_timeout_s);
  const auto micros = static_cast<time_t>((read_timeout_s - static_cast<double>(whole)) * 1e6);
  client->set_read_timeout(whole, micros);
  client->set_write_timeout(whole, micros);
  client->set_connection_timeout(10, 0);
  client->set_tcp_nodelay(true);
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0')
    client->set_bearer_token_auth(key);
  return client;
}

void check_reachable(const Endpoint& endpoint) {
  auto res = probe(endpoint, "/v1/models");
  if (!res)
    fail("cannot reach the server at {}: {} (is it running? check --base-url or --host/--port)",
         endpoint.base_url(), describe(res.error()));
}

std::optional<std::string> discover_model(const Endpoint& endpoint) {
  auto res = probe(endpoint, "/v1/models");
  if (!res)
    fail("cannot reach the server at {} to look up the model: {} (is it running? check --base-url or "
         "--host/--port, or pass --model)",
         endpoint.base_url(), describe(res.error()));
  if (res->status != 200) return std::nullopt;
  auto body = nlohmann::json::parse(res->body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("data") || !body["data"].is_array() ||
      body["data"].empty())
    return std::nullopt;
  const auto& first = body["data"][0];
  if (!first.is_object() || !first.contains("id") || !first["id"].is_string()) return std::nullopt;
  return first["id"].get<std::string>();
}

std::optional<double> fetch_accept_length(const Endpoint& endpoint) {
  auto res = probe(endpoint, "/get_server_info");
  if (!res || res->status != 200) return std::nullopt;
  auto info = nlohmann::json::parse(res->body, nullptr, false);
  if (info.is_discarded() || !info.is_object()) return std::nullopt;
  if (info.contains("decode") && info["decode"].is_array() && !info["decode"].empty()) info = info["decode"][0];
  if (!info.contains("internal_states") || !info["internal_states"].is_array() || info["internal_states"].empty())
    return std::nullopt;
  const auto& state = info["internal_states"][0];
  if (!state.is_object() || !state.contains("avg_spec_accept_length") ||
      !state["avg_spec_accept_length"].is_number())
    return std::nullopt;
  return state["avg_spec_accept_length"].get<double>();
}

}  // namespace moeserve::bench
