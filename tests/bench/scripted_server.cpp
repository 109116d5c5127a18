#include "scripted_server.h"

#include <chrono>
#include <sys/socket.h>

#include <fmt/format.h>
#include <httplib.h>

namespace moeserve::bench::testing {
namespace {
using Clock = std::chrono::steady_clock;

std::string sse(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

nlohmann::json chunk_json(bool chat, const std::string& text, int running_tokens, bool usage) {
  nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}};
  if (chat)
    choice["delta"] = {{"content", text}};
  else
    choice["text"] = text;
  nlohmann::json j = {{"id", "cmpl-scripted"}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"model", "scripted-model"}, {"choices", nlohmann::json::array({choice})}};
  if (usage) j["usage"] = {{"prompt_tokens", 4}, {"completion_tokens", running_tokens}, {"total_tokens", 4 + running_tokens}};
  return j;
}
}  // namespace

Script make_script(int first_ms, int step_ms, const std::vector<int>& tokens) {
  Script s;
  for (size_t i = 0; i < tokens.size(); ++i)
    s.chunks.push_back({first_ms + static_cast<int>(i) * step_ms, tokens[i], true});
  return s;
}

ScriptedServer::ScriptedServer(int threads) : server_(std::make_unique<httplib::Server>()) {
  default_script_ = make_script(50, 10, {1, 1, 2, 1, 2, 1});
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_tcp_nodelay(true);
  server_->Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"scripted-model","object":"model"}]})", "application/json");
  });
  server_->Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json info = {{"internal_states", nlohmann::json::array({{{"avg_spec_accept_length", accept_length_.load()}}})}};
    res.set_content(info.dump(), "application/json");
  });
  auto handler = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = Clock::now();
      nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
      if (body.is_discarded()) {
        res.status = 400;
        res.set_content(R"({"error":{"message":"body is not JSON"}})", "application/json");
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.push_back(body);
      }
      const Script script = script_for(body);
      if (script.status != 200) {
        res.status = script.status;
        res.set_content(fmt::format(R"({{"error":{{"message":"scripted failure {}"}}}})", script.status),
                        "application/json");
        return;
      }
      const bool stream = body.value("stream", false);
      if (!stream) {
        std::this_thread::sleep_until(t0 + std::chrono::milliseconds(script.chunks.empty() ? 0 : script.chunks.back().at_ms));
        int tokens = 0;
        std::string text;
        for (const auto& c : script.chunks) {
          tokens += c.tokens;
          for (int k = 0; k < c.tokens; ++k) text += "t";
        }
        nlohmann::json choice = {{"index", 0}, {"finish_reason", "length"}};
        if (chat)
          choice["message"] = {{"role", "assistant"}, {"content", text}};
        else
          choice["text"] = text;
        nlohmann::json j = {{"choices", nlohmann::json::array({choice})},
                            {"usage", {{"prompt_tokens", 4}, {"completion_tokens", tokens}}}};
        res.set_content(j.dump(), "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [script, chat, t0](size_t, httplib::DataSink& sink) {
        int running = 0, sent = 0;
        for (const auto& c : script.chunks) {
          if (script.drop_after_chunks >= 0 && sent == script.drop_after_chunks) return false;  // drop mid-stream
          std::this_thread::sleep_until(t0 + std::chrono::milliseconds(c.at_ms));
          running += c.text ? c.tokens : 0;
          std::string text;
          if (c.text)
            for (int k = 0; k < c.tokens; ++k) text += fmt::format("t{} ", running - c.tokens + k);
          const std::string msg = sse(chunk_json(chat, text, running, script.continuous_usage));
          if (!sink.write(msg.data(), msg.size())) return false;
          ++sent;
        }
        if (script.drop_after_chunks >= 0) return false;
        std::string tail;
        if (script.final_usage) {
          nlohmann::json last = {{"id", "cmpl-scripted"}, {"choices", nlohmann::json::array()},
                                 {"usage", {{"prompt_tokens", 4}, {"completion_tokens", running}, {"total_tokens", 4 + running}}}};
          tail += sse(last);
        }
        if (script.done_at_ms >= 0) {
          if (!tail.empty() && !sink.write(tail.data(), tail.size())) return false;
          tail.clear();
          std::this_thread::sleep_until(t0 + std::chrono::milliseconds(script.done_at_ms));
        }
        tail += "data: [DONE]\n\n";
        if (!sink.write(tail.data(), tail.size())) return false;
        sink.done();
        return true;
      });
    };
  };
  server_->Post("/v1/completions", handler(false));
  server_->Post("/v1/chat/completions", handler(true));
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of connections overflows the accept queue
  // and some are reset before their request is read. Keep the listening socket and widen the backlog.
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = fd;
  });
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) throw std::runtime_error("scripted server: cannot bind 127.0.0.1");
  if (listen_fd >= 0) ::listen(listen_fd, 4096);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!server_->is_running()) throw std::runtime_error("scripted server: did not start");
}

ScriptedServer::~ScriptedServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void ScriptedServer::set_default_script(Script script) {
  std::lock_guard<std::mutex> lock(mutex_);
  default_script_ = std::move(script);
}

void ScriptedServer::set_script(const std::string& prompt, Script script) {
  std::lock_guard<std::mutex> lock(mutex_);
  scripts_[prompt] = std::move(script);
}

void ScriptedServer::set_accept_length(double value) { accept_length_.store(value); }

std::string ScriptedServer::base_url() const { return fmt::format("http://127.0.0.1:{}", port_); }

std::vector<nlohmann::json> ScriptedServer::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

Script ScriptedServer::script_for(const nlohmann::json& body) const {
  std::string key;
  if (body.contains("prompt") && body["prompt"].is_string()) key = body["prompt"].get<std::string>();
  if (body.contains("messages") && body["messages"].is_array() && !body["messages"].empty()) {
    const auto& last = body["messages"].back();
    if (last.contains("content") && last["content"].is_string()) key = last["content"].get<std::string>();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = scripts_.find(key);
  return it != scripts_.end() ? it->second : default_script_;
}

}  // namespace moeserve::bench::testing
