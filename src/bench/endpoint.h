#pragma once
// Where the benchmark sends requests: --base-url, or http://--host:--port, as sglang.bench_serving
// resolves them, plus the small GET probes around a run (model discovery, speculative accept length).
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace httplib {
class Client;
}

namespace moeserve::bench {

struct Endpoint {
  std::string origin;  // scheme://host:port, what an HTTP client connects to
  std::string prefix;  // path prefix of --base-url without a trailing slash ("" when none)
  std::string base_url() const { return origin + prefix; }
  std::string path(std::string_view p) const { return prefix + std::string(p); }
};

// `base_url` wins when non-empty (http:// or https://, optional path prefix); otherwise host and port.
Endpoint make_endpoint(const std::string& base_url, const std::string& host, int port);

// A client for one request: TCP_NODELAY, the given read timeout (a long stream is one response),
// and the bearer token from OPENAI_API_KEY when set, as SGLang's client sends it.
std::unique_ptr<httplib::Client> make_client(const Endpoint& endpoint, double read_timeout_s);

// GET /v1/models → data[0].id. Throws moeserve::Error with a clear message when the server cannot be
// reached; returns nullopt when it answers without a usable model list.
std::optional<std::string> discover_model(const Endpoint& endpoint);

// Checks that the server accepts connections at all (GET /v1/models, any HTTP status is fine).
// Throws moeserve::Error naming the URL and the transport error otherwise.
void check_reachable(const Endpoint& endpoint);

// GET /get_server_info → internal_states[0].avg_spec_accept_length (sglang servers; "decode" for PD).
std::optional<double> fetch_accept_length(const Endpoint& endpoint);

}  // namespace moeserve::bench
