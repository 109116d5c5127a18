#pragma once
// An in-process OpenAI-style server on 127.0.0.1 (an ephemeral port) whose responses follow a script
// with known timings, so every benchmark metric can be computed by hand. A script is chosen by the
// request's prompt text (completions) or last message content (chat); others get the default script.
// Chunk times are absolute offsets from the moment the request was parsed, so sleeping errors do not
// accumulate along the stream.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace httplib {
class Server;
}

namespace moeserve::bench::testing {

struct ScriptedChunk {
  int at_ms = 0;     // when to send, from the request's arrival
  int tokens = 1;    // tokens this chunk carries (one text piece per token)
  bool text = true;  // false: a chunk with empty text (e.g. a role delta)
};

struct Script {
  int status = 200;                  // != 200: reply with this status and a JSON error body at once
  std::vector<ScriptedChunk> chunks;
  bool continuous_usage = true;      // usage.completion_tokens (running count) in every chunk
  bool final_usage = true;           // a last chunk with empty choices and the usage
  int drop_after_chunks = -1;        // >= 0: close the connection after this many chunks (no [DONE])
  int done_at_ms = -1;               // when to send [DONE] (default: with the last chunk)
};

// first chunk at `first_ms`, then one every `step_ms`; token counts per chunk from `tokens`.
Script make_script(int first_ms, int step_ms, const std::vector<int>& tokens);

class ScriptedServer {
 public:
  explicit ScriptedServer(int threads = 32);
  ~ScriptedServer();
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  void set_default_script(Script script);
  void set_script(const std::string& prompt, Script script);
  void set_accept_length(double value);

  int port() const { return port_; }
  std::string base_url() const;
  // Bodies of the POST requests received, in arrival order.
  std::vector<nlohmann::json> requests() const;

 private:
  Script script_for(const nlohmann::json& body) const;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mutex_;
  Script default_script_;
  std::map<std::string, Script> scripts_;
  std::vector<nlohmann::json> requests_;
  std::atomic<double> accept_length_{0.0};
};

}  // namespace moeserve::bench::testing
