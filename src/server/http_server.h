#pragma once
// The OpenAI-compatible HTTP server: POST /v1/completions and /v1/chat/completions (streaming SSE and not),
// GET /v1/models[/{id}], /health, /metrics, /get_server_info; POST /tokenize, /detokenize. Requests are validated here (4xx with an OpenAI error object naming the
// field) and run by the engine; a client that goes away mid-request aborts it, and its KV pages are freed.
#include <atomic>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/openai_request.h"
#include "server/tokenizer.h"

namespace httplib {
class Server;
}

namespace moeserve::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;          // 0: any free port (see HttpServer::port())
  std::string model_name;    // what /v1/models lists and requests must name
  size_t max_body_bytes = 8u << 20;
  int threads = 128;         // each streaming response holds one
  RequestDefaults defaults;
};

class HttpServer {
 public:
  HttpServer(std::shared_ptr<engine::Engine> engine, std::shared_ptr<const Tokenizer> tokenizer, ServerOptions options);
  ~HttpServer();

  // Binds the socket; throws moeserve::Error naming host:port if it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop() (call bind() first).
  void serve();
  void stop();

 private:
  void install_routes();

  std::shared_ptr<engine::Engine> engine_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace moeserve::server
