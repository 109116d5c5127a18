#pragma once
// The --backend names of sglang.bench_serving that speak the OpenAI API, streaming over SSE.
#include <string>
#include <vector>

namespace moeserve::bench {

enum class Api { kCompletions, kChat };  // POST /v1/completions or POST /v1/chat/completions

struct Backend {
  std::string name;
  Api api;
  int default_port;        // SGLang's default when --port is not given
  bool reports_accept_len; // sglang servers: GET /get_server_info has the speculative accept length
  const char* path() const { return api == Api::kChat ? "/v1/chat/completions" : "/v1/completions"; }
};

// Throws moeserve::Error listing the valid names when `name` is unknown.
const Backend& find_backend(const std::string& name);
std::vector<std::string> backend_names();

}  // namespace moeserve::bench
